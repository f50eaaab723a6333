"""A step raises the cyclic collector's youngest threshold while it runs and leaves every threshold as it found it:
returned or raised, nested, and with two threads inside at once (zerosim/_collector.py)."""

import gc
import threading

import pytest

from zerosim import Adam, Cluster, TinyNet, ZeroEngine
from zerosim.parallel.data import _engine
from zerosim._collector import YOUNG_COLLECTIONS, fewer_collections

ODD = (701, 11, 12)  # not CPython's defaults (700, 10, 10): a threshold put back wrongly would not read so


@pytest.fixture
def odd_thresholds():
    before = gc.get_threshold()
    gc.set_threshold(*ODD)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_a_step_raises_the_youngest_threshold_and_puts_it_back(odd_thresholds, monkeypatch):
    seen, real = [], _engine.update
    monkeypatch.setattr(_engine, "update", lambda *a, **k: seen.append(gc.get_threshold()) or real(*a, **k))
    engine = ZeroEngine(TinyNet(), Cluster(2), 3, Adam(lr=0.1))
    engine.step(TinyNet.seed_batches())
    assert seen == [(YOUNG_COLLECTIONS, 11, 12)] and gc.get_threshold() == ODD
    def stop(*a, **k):
        seen.append(gc.get_threshold())
        raise KeyboardInterrupt("stopped in the update")

    monkeypatch.setattr(_engine, "update", stop)
    with pytest.raises(KeyboardInterrupt, match="stopped in the update"):  # raised inside the step
        engine.step(TinyNet.seed_batches())
    assert seen[-1] == (YOUNG_COLLECTIONS, 11, 12) and gc.get_threshold() == ODD


def test_the_steps_frame_holds_it_as_a_pipeline_enters_it(odd_thresholds):
    """`stepping`, the frame a pipeline's step enters for each stage's engine (parallel/pipeline): raised inside."""
    engines = [ZeroEngine(TinyNet(), Cluster(2), 3, Adam(lr=0.1)) for _ in range(2)]
    with engines[0].stepping(), engines[1].stepping():
        assert gc.get_threshold() == (YOUNG_COLLECTIONS, 11, 12)
    assert gc.get_threshold() == ODD


def test_nested_blocks_and_a_higher_threshold(odd_thresholds):
    with fewer_collections():
        with fewer_collections():
            assert gc.get_threshold() == (YOUNG_COLLECTIONS, 11, 12)
        assert gc.get_threshold() == (YOUNG_COLLECTIONS, 11, 12)  # the outer block still runs
    assert gc.get_threshold() == ODD
    gc.set_threshold(10 * YOUNG_COLLECTIONS, 11, 12)  # higher already: not lowered, and left so
    with fewer_collections():
        assert gc.get_threshold() == (10 * YOUNG_COLLECTIONS, 11, 12)
    assert gc.get_threshold() == (10 * YOUNG_COLLECTIONS, 11, 12)


def test_a_threshold_set_inside_the_block_is_kept(odd_thresholds):
    with fewer_collections():
        gc.set_threshold(5000, 11, 12)
    assert gc.get_threshold() == (5000, 11, 12)


def test_two_threads_overlapping_leave_the_thresholds_as_they_were(odd_thresholds):
    """Thread A enters, B enters, A leaves (B still inside: raised), B leaves (put back): saving and restoring per
    block would leave B's saved YOUNG_COLLECTIONS behind for good."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with fewer_collections():
            a_in.set()
            b_in.wait()
        seen["a left"] = gc.get_threshold()
        a_out.set()

    def b():
        a_in.wait()
        with fewer_collections():
            b_in.set()
            a_out.wait()
        seen["b left"] = gc.get_threshold()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == {"a left": (YOUNG_COLLECTIONS, 11, 12), "b left": ODD}
    assert gc.get_threshold() == ODD
