"""The contract between the step and a parallelism: four points in a step where a parallelism acts, each returning
the handles of what it started, which the step's later work waits for.

The data-parallel step (parallel/data/_engine.py) is written out in full — it names every collective of every
stage — and is the example every other parallelism follows. Its own pieces sit at these same points:

    point              when                                     data parallelism does      another parallelism might
    before_unit        before a unit's compute, after DP's      stage 3: all-gather the    offload: fetch the unit's
                       gather; the compute waits for it          unit's params              params from host / NVMe
    after_unit         after a unit's compute, DP's release     stage 3: free the gather;  tensor parallelism: all-
                       and DP's reduce; the next compute waits   stages 2/3: reduce-        reduce the activation the
                                                                 scatter its gradients      unit hands on
    end_of_backward    after DP's end-of-backward reduction,    stage 0: all-reduce;       offload: copy the reduced
                       before the overflow check; the update     stage 1: reduce-scatter    gradient shard to host
                       waits for it
    after_update       after the optimizer, before DP's         stages 1/2: all-gather     offload: the updated
                       refresh; the next step's first compute    the updated params         16-bit shard back to the
                       waits for it                                                         device

`setup(ctx)` runs once, after every rank's model states are born, for a parallelism to allocate what it keeps (on
the ranks' ledgers: state lives on the rank).

Three facts a parallelism states before the step is built, because data parallelism is laid out around them:
`degrees`, the mesh dims it takes ({"tp": T} for tensor parallelism: the data-parallel groups are then cut from what
the world leaves, parallel/data/multinode/_groups.py); `initial_params(dims, rank)`, the weights a rank starts
from where ranks hold different parts of the model (tensor parallelism: each TP rank its slice; None: the engine's
`params`, the same on every rank, as data parallelism alone has it); and `place(plan)`, where each buffer lives (a
parallelism that moves buffers off the device, offload, returns the plan with its placement, which the helpers that
allocate read as data). Once the gradient recipe is chosen, `check_recipe(recipe)` lets a parallelism refuse one it
does not run beside, still before anything is allocated (offload: one framework's offload under the other's recipe).
Two more are for the planner alone: `micro_steps_alike` and `step_end_tags` say that on the meta backend its calls
are the same in every micro-step, and which it makes once a step, so a step's second micro-step is written from the
first instead of run (analysis/planner/_repeat.py; tensor and context parallelism say so, offload does not).

A hook takes the step's frozen `Context` (ctx: the cluster, the plan, the layout, the formats), the ranks' micro-
batches in flight where it runs between units (`passes[i]`: local rank i's `models.Pass`, whose `a` is the
activation going forward and `dy` the gradient coming back) and the unit's ops (`models.Op`: its `layer` and `kind`,
"forward", "backward", ...); it never takes the engine. Anything it sends goes through `zerosim.collectives` (over
`ctx.cluster`), so it is in the trace with a handle; anything it holds goes through a rank's ledger.

`Parallelisms` fans the four points out to every parallelism an engine was given, in order, and adds their handles.
With none (the default), every point returns an empty handle and the step is the data-parallel step alone, call for
call and bit for bit. docs/explanation/adding-a-parallelism.md walks a new one through the contract.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.cluster import Handle


class Parallelism:
    """One parallelism beside data parallelism: override the points it acts at (see the module docstring); each
    returns the `Handle` of the collectives or transfers it started (`Handle()` when none)."""

    name = "parallelism"
    degrees: dict = {}  # the mesh dims it takes, {dim: degree} (tensor parallelism: {"tp": T}); none by default
    # the parallelisms it does not run beside, {their name: why} (checked by `Parallelisms` before the step is built)
    refuses: dict = {}
    # On the meta backend, whether every micro-step of a step makes this parallelism's calls (its `name` their
    # purpose) again alike, and the tags of the calls it makes once a step, after the micro-steps (`end_of_backward`,
    # `after_update`): where they are, the planner writes a step's second micro-step from its first instead of running
    # it (analysis/planner/_repeat.py). Neither is assumed of a parallelism that does not say so.
    micro_steps_alike: bool = False
    step_end_tags: tuple = ()

    @property
    def active(self) -> bool:
        """Whether it does anything (tensor parallelism of degree 1 does not: it is then no parallelism)."""
        return True

    def initial_params(self, dims, rank: int):
        """The (P,) weights `rank` starts from, where this parallelism gives ranks different ones (`dims`: the job's
        `ParallelDims`); None to leave them to the engine's `params`."""
        return None

    def place(self, plan):
        """Before any state is born: the plan with this parallelism's placement (where each buffer lives: device,
        host, NVMe, `Plan.placement`), as data the step's helpers read; the plan itself by default."""
        return plan

    def check_recipe(self, recipe) -> None:
        """Before anything is allocated: raise ValueError if this parallelism cannot run beside the gradient `recipe`
        (a `GradientRecipe`); any recipe by default."""

    def setup(self, ctx) -> None:
        """Once, after the ranks' model states are born: allocate what this parallelism keeps, in the ledgers."""

    def before_unit(self, ctx, passes: list, ops: list) -> Handle:
        """Before `ops` (a unit's forward, recompute or backward; `ops[0].layer` is the unit) run on every rank."""
        return Handle()

    def after_unit(self, ctx, passes: list, ops: list) -> Handle:
        """After `ops` ran on every rank (and data parallelism released and reduced what it does there)."""
        return Handle()

    def end_of_backward(self, ctx, reduced: list) -> Handle:
        """After data parallelism's end-of-backward reduction: `reduced[i]` is local rank i's reduced gradient."""
        return Handle()

    def after_update(self, ctx) -> Handle:
        """After the optimizer stepped on every rank, before data parallelism refreshes the 16-bit params."""
        return Handle()


@dataclass(frozen=True)
class Parallelisms:
    """The parallelisms an engine runs beside data parallelism, in order: each point calls every one and adds up
    their handles."""

    members: tuple = ()

    def __post_init__(self):
        members = tuple(self.members)
        bad = [m for m in members if not isinstance(m, Parallelism)]
        if bad:
            raise TypeError(f"parallelisms must be zerosim.parallel.Parallelism objects, got {bad[0]!r}")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"each parallelism at most once, got {names}")
        for a in members:  # a pair one of them refuses, before any state is born (active members only)
            for b in members:
                if a is not b and b.name in a.refuses and a.active and b.active:
                    raise ValueError(a.refuses[b.name])
        object.__setattr__(self, "members", members)

    @property
    def degrees(self) -> dict:
        """{dim: degree} of every member's dims (two members may not take the same dim)."""
        out = {}
        for m in self.members:
            taken = set(out) & set(m.degrees)
            if taken:
                raise ValueError(f"two parallelisms take the mesh dim {sorted(taken)[0]!r}")
            out.update(m.degrees)
        return out

    def initial_params(self, dims, ranks) -> dict:
        """{rank index: (P,) weights} for the `ranks` (indices) whose weights a member gives; {} when none does."""
        out = {}
        for m in self.members:
            for r in ranks:
                w = m.initial_params(dims, r)
                if w is not None:
                    out[r] = w
        return out

    @property
    def per_unit(self) -> bool:
        """Whether a parallelism acts between units, so the step hands the ranks one unit at a time."""
        return bool(self.members)

    def place(self, plan):
        for m in self.members:
            plan = m.place(plan)
        return plan

    def check_recipe(self, recipe) -> None:
        for m in self.members:
            m.check_recipe(recipe)

    def setup(self, ctx) -> None:
        for m in self.members:
            m.setup(ctx)

    def before_unit(self, ctx, passes, ops) -> Handle:
        return sum((m.before_unit(ctx, passes, ops) for m in self.members), Handle())

    def after_unit(self, ctx, passes, ops) -> Handle:
        return sum((m.after_unit(ctx, passes, ops) for m in self.members), Handle())

    def end_of_backward(self, ctx, reduced) -> Handle:
        return sum((m.end_of_backward(ctx, reduced) for m in self.members), Handle())

    def after_update(self, ctx) -> Handle:
        return sum((m.after_update(ctx) for m in self.members), Handle())
