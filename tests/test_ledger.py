"""MemoryLedger: allocations by kind, current and peak bytes, the timeline, misuse errors, and what
collectives leave behind. Every byte count below is elements * itemsize worked by hand."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from zerosim import Cluster, LedgerError, MemoryLedger, all_gather, all_reduce, broadcast, reduce_scatter


def test_alloc_and_free_track_current_and_peak_per_kind_and_total():
    led = MemoryLedger(rank=3)
    p = led.alloc("w16", (10,), np.float16, "params")  # 10 * 2 = 20 B
    m = led.alloc("w32", (10,), np.float32, "master")  # 10 * 4 = 40 B
    g = led.alloc("g16", (2, 5), np.float16, "grads", fill=0)  # 10 * 2 = 20 B
    assert (p.nbytes, m.nbytes, g.nbytes) == (20, 40, 20)
    assert (p.name, p.kind, p.shape, p.dtype) == ("w16", "params", (10,), np.dtype(np.float16))
    assert (m.dtype, g.shape) == (np.dtype(np.float32), (2, 5))
    assert (g.array == 0).all() and g.array.dtype == np.float16
    assert led.current() == 80 and led.peak() == 80
    assert (led.current("params"), led.current("master"), led.current("grads"), led.current("optim:m")) == (
        20,
        40,
        20,
        0,
    )
    led.free(g)
    led.free("w32")  # by name works too
    assert led.current() == 20 and led.peak() == 80
    assert led.current("master") == 0 and led.peak("master") == 40
    assert led.by_kind() == {"params": 20}  # kinds with nothing live are left out
    assert led.peak_by_kind() == {"params": 20, "master": 40, "grads": 20}
    led.alloc("w32b", 10, np.float32, "master")  # a scalar shape means a flat buffer
    assert led.current() == 60 and led.peak() == 80 and led.peak("master") == 40
    assert led.get("w32b").shape == (10,) and set(led.live) == {"w16", "w32b"}


def test_an_empty_buffer_gives_its_kind_a_peak_of_zero_and_frees_never_raise_a_peak():
    led = MemoryLedger(rank=0)
    led.adopt("e", np.empty(0, np.float32), "comm")  # 0 B of a kind never seen: the kind is listed, at 0
    assert led.peak_by_kind() == {"comm": 0}
    a = led.alloc("a", 3, np.float32, "params")  # 12 B
    led.adopt("e2", np.empty(0, np.float32), "params")  # 0 B of a kind already at 12: its peak stays 12
    led.free(a)  # params 12 -> 0: the peak stays where it was
    led.alloc("b", 2, np.float32, "params")  # 8 B, below the peak of 12
    assert led.peak_by_kind() == {"comm": 0, "params": 12}  # by hand, one row per kind
    assert (led.peak(), led.current()) == (12, 8)


def test_peak_total_is_the_most_live_at_once_not_the_sum_of_kind_peaks():
    led = MemoryLedger(0)
    a = led.alloc("a", 100, np.uint8, "activations")  # 100 B
    led.free(a)
    led.alloc("b", 60, np.uint8, "comm")  # 60 B, never alongside a
    assert led.peak() == 100 and led.peak("activations") + led.peak("comm") == 160
    led.reset_peaks()
    assert led.peak() == 60 and led.peak("activations") == 0 and led.peak("comm") == 60


def test_timeline_records_every_event_with_totals_and_phase():
    c = Cluster(1)
    led = c.ranks[0].ledger
    with c.phase("forward layer 1"):
        a = led.alloc("act1", 8, np.float32, "activations")  # 32 B
        with c.phase("inner"):
            led.alloc("tmp", 4, np.float16, "comm")  # 8 B
        led.free("tmp")
    led.free(a)
    rows = [(e.seq, e.action, e.name, e.kind, e.nbytes, e.total, e.kind_total, e.phase) for e in led.timeline]
    assert rows == [
        (1, "alloc", "act1", "activations", 32, 32, 32, "forward layer 1"),
        (2, "alloc", "tmp", "comm", 8, 40, 8, "inner"),
        (3, "free", "tmp", "comm", 8, 32, 0, "forward layer 1"),  # the label came back after the inner block
        (4, "free", "act1", "activations", 32, 0, 0, ""),
    ]
    assert led.phase_label == ""


def test_timeline_can_be_turned_off_without_changing_the_accounting():
    led = Cluster(2, timeline=False).ranks[1].ledger
    led.alloc("x", 16, np.float64, "master")
    assert led.timeline == [] and led.current() == 128 and led.peak("master") == 128


def test_double_free_names_the_buffer():
    led = MemoryLedger(1)
    b = led.alloc("adam_m", 4, np.float32, "optim:m")
    b.free()
    with pytest.raises(LedgerError, match="'adam_m'.*not live"):
        b.free()
    with pytest.raises(LedgerError, match="'adam_m'"):
        led.free("adam_m")
    assert led.current() == 0 and len(led.timeline) == 2  # the failed frees changed nothing


def test_reading_a_freed_buffer_names_it():
    led = MemoryLedger(2)
    b = led.alloc("grad_shard", 4, np.float32, "grad32")
    _ = b.array
    led.free(b)
    assert b.freed
    with pytest.raises(LedgerError, match="rank 2: buffer 'grad_shard' .*freed"):
        _ = b.array


@pytest.mark.bad_input("ledgers", unchanged=True)
def test_a_stale_handle_cannot_free_a_new_buffer_of_the_same_name():
    led = MemoryLedger(0)
    old = led.alloc("x", 4, np.float32, "comm")
    old.free()
    new = led.alloc("x", 8, np.float32, "comm")
    with pytest.raises(LedgerError, match="'x'"):
        old.free()
    assert not new.freed and led.current() == 32


@pytest.mark.bad_input("ledgers")
def test_name_clash_and_unknown_name_are_ledger_errors():
    led = MemoryLedger(0)
    led.alloc("p", 2, np.float16, "params")
    with pytest.raises(LedgerError, match="'p' is already live"):
        led.alloc("p", 2, np.float16, "params")
    with pytest.raises(LedgerError, match="no live buffer named 'q'"):
        led.get("q")
    assert led.current() == 4


def test_a_ledger_let_go_keeps_its_numbers_forgets_its_names_and_goes_with_its_last_reference():
    """`let_go`: the totals, peaks and timeline stay (bytes worked by hand: 4 × 2 + 3 × 4 = 20 B, one freed of 8 B
    before); no buffer is live by name after, so freeing or finding one is refused; and the ledger, which its live
    buffers point back at, is freed by reference counting alone, where without `let_go` the collector had to find
    the cycle."""
    import gc
    import weakref

    def ledger_with_buffers(let_go: bool):
        led = MemoryLedger(0)
        led.alloc("a", 4, np.float16, "params")
        led.alloc("b", 3, np.float32, "master")
        led.alloc("c", 4, np.float16, "grads").free()
        before = (led.current(), led.peak(), led.peak("grads"), led.by_kind(), len(led.timeline))
        assert before == (20, 28, 8, {"params": 8, "master": 12}, 4)
        if let_go:
            kept = led.live["a"]
            led.let_go()
            assert (led.current(), led.peak(), led.peak("grads"), led.by_kind(), len(led.timeline)) == before
            assert led.live == {}
            with pytest.raises(LedgerError, match="'a' is not live"):
                led.free(kept)
            with pytest.raises(LedgerError, match="no live buffer named 'b'"):
                led.get("b")
        return weakref.ref(led)

    enabled = gc.isenabled()
    gc.disable()  # only reference counting frees anything here
    try:
        assert ledger_with_buffers(let_go=True)() is None
        held = ledger_with_buffers(let_go=False)
        assert held() is not None  # a ledger and its live buffers: a cycle, left for the collector
        gc.collect()
        assert held() is None
    finally:
        if enabled:
            gc.enable()


def test_adopt_registers_an_existing_array():
    led = MemoryLedger(0)
    arr = np.zeros((3, 4), ml_dtypes.bfloat16)
    b = led.adopt("out", arr, "params")
    assert b.array is arr and b.nbytes == 24 and led.current("params") == 24


def test_a_data_less_array_is_adopted_with_its_shape_dtype_and_bytes():
    """A MetaArray (the meta backend's) becomes a buffer without `Buffer.__init__` (cluster/_ledger.py `_buffer`):
    the same name, kind, shape, dtype and bytes it would set, worked by hand: 3 × 4 bfloat16 = 24 B, 5 float32 = 20 B,
    a 0-d float64 8 B."""
    from zerosim.precision.cast import MetaArray

    led = MemoryLedger(0)
    cases = {"w": (MetaArray((3, 4), ml_dtypes.bfloat16), (3, 4), np.dtype(ml_dtypes.bfloat16), 24),
             "v": (MetaArray(np.int64(5), np.float32), (5,), np.dtype(np.float32), 20),
             "s": (MetaArray((), "float64"), (), np.dtype(np.float64), 8)}
    for name, (array, shape, dtype, nbytes) in cases.items():
        b = led.adopt(name, array, "params")
        assert (b.name, b.kind, b.shape, b.dtype, b.nbytes, b.array is array) == (name, "params", shape, dtype, nbytes,
                                                                                True)
        assert type(b.shape) is tuple and all(type(n) is int for n in b.shape) and type(b.nbytes) is int
    assert led.current("params") == led.peak() == 52
    led.free("w")
    assert led.current() == 28


def test_custom_empty_is_used_for_storage():
    made = []

    def empty(shape, dtype):
        made.append((shape, dtype))
        return np.zeros(shape, dtype)

    led = MemoryLedger(0, empty=empty)
    led.alloc("x", (2, 3), np.float16, "params")
    assert made == [((2, 3), np.dtype(np.float16))]


# -- what collectives leave behind --------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize(
    "length, dtype, wire, op",
    [
        (10, np.float32, "bf16", "sum"),  # the wire format differs: inputs are cast into a staging buffer
        (10, np.float16, None, "sum"),  # 10 is not a multiple of 3, 4 or 8: a padded copy (n = 2 needs none)
        (16, np.float32, None, "avg_premul"),  # the op rewrites the input before it goes on the wire
    ],
)
def test_reduce_scatter_frees_its_staging_and_records_a_comm_peak(n, length, dtype, wire, op):
    c = Cluster(n)
    for r in c.ranks:  # something the rank already holds, which must be untouched
        r.ledger.alloc("params", length, np.float16, "params")
    reduce_scatter(c, [np.ones(length, dtype) for _ in range(n)], op=op, wire=wire)
    wire_bytes = np.dtype(dtype if wire is None else ml_dtypes.bfloat16).itemsize
    padded = n * -(-length // n)
    for r in c.ranks:
        led = r.ledger
        assert led.current() == 2 * length and led.current("comm") == 0  # only the params remain
        assert set(led.live) == {"params"}
        staged = not (wire is None and op == "sum" and padded == length)
        if staged:  # the whole padded buffer was copied in the wire dtype, so at least that much was live
            assert led.peak("comm") >= padded * wire_bytes
        comm = [e for e in led.timeline if e.kind == "comm"]
        assert sum(e.nbytes for e in comm if e.action == "alloc") == sum(e.nbytes for e in comm if e.action == "free")


def test_staging_costs_memory_that_a_zero_copy_call_does_not():
    """Same shapes, same world: casting to another wire format needs a staged copy of the padded buffer;
    a call that sends its input as it is allocates nothing in the ledger (the ring's partial sums live in
    its transport buffers, as NCCL's do in its fixed FIFOs)."""
    n, length = 4, 64

    def comm_peak(wire):
        c = Cluster(n)
        reduce_scatter(c, [np.ones(length, np.float16) for _ in range(n)], wire=wire)
        return [r.ledger.peak("comm") for r in c.ranks]

    assert comm_peak(None) == [0] * n
    assert comm_peak("fp32") == [length * 4] * n  # exactly one staged fp32 copy of the (padded) buffer


@pytest.mark.parametrize("n", [1, 2, 5])
def test_every_collective_leaves_zero_bytes_live(n):
    c = Cluster(n)
    x = [np.ones(7, np.float32) for _ in range(n)]
    reduce_scatter(c, x, wire="fp16")
    all_reduce(c, x, op="avg_predivide")
    all_gather(c, [np.ones(2, np.float32)] * n)
    broadcast(c, x, root=n - 1)
    reduce_scatter(c, x, counts=[7] + [0] * (n - 1))
    for r in c.ranks:
        assert r.ledger.current() == 0 and r.ledger.live == {}


@pytest.mark.parametrize(
    "shard_sizes, dtype, wire",
    [
        ([3, 3, 3, 1], np.float32, None),  # a 10-element buffer's last shard travels padded to 3
        ([2, 2, 2, 2], np.float16, "fp32"),  # the shards are cast to the wire format before they travel
    ],
)
def test_all_gather_stages_through_the_ledger_too(shard_sizes, dtype, wire):
    """A padded or re-typed copy of a shard is a buffer the rank holds while the ring runs, so it goes
    through the ledger as "comm" (as reduce-scatter's staging does) and is freed afterwards."""
    n = len(shard_sizes)
    c = Cluster(n)
    all_gather(c, [np.ones(k, dtype) for k in shard_sizes], wire=wire)
    wire_bytes = np.dtype(dtype if wire is None else np.float32).itemsize
    s = max(shard_sizes)
    for r in c.ranks:
        staged = wire is not None or shard_sizes[r.index] < s
        assert r.ledger.current() == 0
        if staged:
            assert r.ledger.peak("comm") >= s * wire_bytes, (r.index, r.ledger.peak_by_kind())


def test_live_at_peaks_names_what_made_each_peak():
    # Hand-built: phase "a" allocs x (10 B) and y (6 B), frees y, allocs z (3 B): its peak, 16 B, is
    # x + y; phase "b" allocs w (20 B) on top of x and z: its peak, 33 B, is x + z + w.
    led = MemoryLedger(rank=0)
    led.phase_label = "a"
    x = led.alloc("x", 10, np.uint8, "params")
    y = led.alloc("y", 6, np.uint8, "grads")
    y.free()
    led.alloc("z", 3, np.uint8, "activations")
    led.phase_label = "b"
    led.alloc("w", 20, np.uint8, "comm")
    assert led.live_at_peaks() == [
        ("a", [("x", "params", 10), ("y", "grads", 6)]),
        ("b", [("x", "params", 10), ("z", "activations", 3), ("w", "comm", 20)]),
    ]
    assert x.nbytes == 10


def _alike_events(rng, round_: int, lead, twin, after=lambda: None) -> None:
    """A round of 1 to 11 random allocs and frees of six names, made alike on `lead` and `twin` (a freed name's
    buffer allocated again with a size drawn for `lead`), phase "phase <round_>"; `after()` after each."""
    names = [f"b{i}" for i in range(6)]
    for _ in range(int(rng.integers(1, 12))):
        name = names[int(rng.integers(len(names)))]
        for led in (lead, twin):
            led.phase_label = f"phase {round_}"
            if name in led.live:
                led.free(name)
            else:
                led.alloc(name, (int(rng.integers(0, 5)) if led is lead else lead.live[name].shape[0],),
                          np.float32, "activations" if name < "b3" else "grads")
        after()


@pytest.mark.parametrize("seed", range(6))
def test_a_folded_timeline_answers_as_the_whole_one_from_where_it_was_cut(seed):
    """`fold_timeline` (a long run's window lets each step's events go): what was live before the first event held is
    what a plain replay of the whole timeline up to the cut leaves live (worked here name by name, apart from the
    ledger), and the phase questions asked from the cut on answer as on a ledger that never folded. The events are
    read into `LedgerEvent`s now and then between the folds, so a fold meets events, plain tuples and both."""
    rng = np.random.default_rng(seed)
    whole, window = MemoryLedger(rank=0), MemoryLedger(rank=0)
    window.absolute = True  # as a Cluster's window sets it: positions count from the run's first event
    for round_ in range(8):
        _alike_events(rng, round_, whole, window)
        if rng.random() < 0.5:
            window.timeline  # noqa: B018  (read: its tuples become events)
        cut = int(rng.integers(window.timeline_folded, whole._seq + 1))
        window.fold_timeline(cut)
        assert window.timeline_folded == cut
        replayed = {}
        for e in whole.timeline[:cut]:
            if e.action == "alloc":
                replayed[e.name] = (e.kind, e.nbytes)
            else:
                del replayed[e.name]
        assert window._live_before == replayed
        assert [repr(e) for e in window.timeline] == [repr(e) for e in whole.timeline[cut:]]
        for question in ("by_phase", "peaks_by_phase", "live_at_peaks"):
            assert getattr(window, question)(since=cut) == getattr(whole, question)(since=cut), question


@pytest.mark.parametrize("seed", range(6))
def test_a_fold_that_takes_the_buffers_live_at_its_cut_answers_as_one_that_replays_the_events(seed):
    """`fold_timeline(cut, live_then)` with the ledger's `mark` taken when its last event was `cut` (a step's end, in a
    Cluster): what was live before the first event held, name by name and in the order the events left it, and the
    phase questions from the cut on, as a replay of the events folded (a twin folded without the mark) gives them."""
    rng = np.random.default_rng(seed)
    replays, marked = MemoryLedger(rank=0), MemoryLedger(rank=0)
    marks = {0: marked.mark()}
    for round_ in range(8):
        _alike_events(rng, round_, replays, marked, lambda: marks.update({marked._seq: marked.mark()}))
        if rng.random() < 0.5:
            marked.timeline  # noqa: B018  (read: its tuples become events)
        cut = int(rng.choice([seq for seq in marks if seq >= marked.timeline_folded]))
        assert marks[cut][0] == cut and marks[cut][1] is not None
        replays.fold_timeline(cut)
        marked.fold_timeline(*marks[cut])
        assert list(marked._before().items()) == list(replays._live_before.items())
        assert [repr(e) for e in marked.timeline] == [repr(e) for e in replays.timeline]
        for question in ("by_phase", "peaks_by_phase", "live_at_peaks"):
            assert getattr(marked, question)() == getattr(replays, question)(), question


def test_a_mark_holds_no_buffers_where_the_events_do_not_say_what_is_live():
    """Events made while the ledger kept no timeline, or buffers let go of, leave `live` other than what the events
    held replay to: `mark` gives no buffers there, and a fold replays."""
    quiet = MemoryLedger(rank=0, keep_timeline=False)
    quiet.alloc("a", (4,), np.float32, "params")
    quiet.keep_timeline = True
    quiet.alloc("b", (4,), np.float32, "params")
    assert quiet.mark() == (2, None)
    gone = MemoryLedger(rank=0)
    gone.alloc("a", (4,), np.float32, "params")
    assert gone.mark()[1] is not None
    gone.let_go()
    assert gone.mark() == (1, None)
