"""Ranks as a mesh with named dims, and the groups a collective runs over (torch's DeviceMesh, NCCL communicators).

    mesh = Mesh((2, 4), ("node", "gpu"))     # 8 ranks: rank = 4·node + gpu, laid out as torch's init_device_mesh does
    mesh.groups("gpu")                       # within a node:  (0 1 2 3) (4 5 6 7)
    mesh.groups("node")                      # across nodes:   (0 4) (1 5) (2 6) (3 7)
    Mesh((2, 4), ("replicate", "shard"))     # FSDP2's HSDP mesh: shard within a node, replicate across nodes

Letters: N ranks, G GPUs per node (the physical topology: rank r sits on node r // G), n ranks per group.

A `Groups` is a partition of the N ranks into equal groups, each listed in its ring order: what a collective
runs over when every rank passes *its own* group of one kind — its shard group, its node — as every process of
a torch job passes its process group, and as NCCL runs one communicator per group. A collective over a `Groups`
is one call for all of them at once (each group its own ring, side by side); `Groups.world(N)` is the flat
cluster's one ring, the default, and nothing about it changes.

A hop's link tier follows from the topology alone: "intra-node" when both ranks sit on one node (NVLink),
"inter-node" otherwise (InfiniBand). A ring is as fast as its slowest hop, so a group's tier is "inter-node"
as soon as one of its hops leaves a node.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from zerosim._dataclass import dataclass

INTRA, INTER = "intra-node", "inter-node"
TIERS = (INTRA, INTER)  # the two link tiers: NVLink within a node, InfiniBand across nodes


def _positive(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def node_of(rank: int, gpus_per_node: int | None) -> int:
    """The node rank `rank` sits on: r // G (every rank on node 0 when G is None: a flat cluster, one node)."""
    return 0 if gpus_per_node is None else rank // gpus_per_node


def hop_tier(src: int, dst: int, gpus_per_node: int | None) -> str:
    """The link tier a send from `src` to `dst` crosses: "intra-node" (same node) or "inter-node"."""
    return INTRA if node_of(src, gpus_per_node) == node_of(dst, gpus_per_node) else INTER


@dataclass(frozen=True)
class Groups:
    """N ranks cut into equal groups, each in ring order: rank `members[g][p]` is position p of group g.

    A collective over `Groups` runs one ring per group, in the group's order (position p sends to p+1, mod n),
    all at once; each rank takes part in exactly one of them. Build one from a `Mesh` dim, or `world`, `blocks`,
    `strided`."""

    name: str  # what the groups are, for the trace and messages: "world", "shard", "replicate", "node", ...
    members: tuple  # ((rank, ...), ...): every group's ranks in ring order

    def __post_init__(self):
        members = tuple(tuple(int(r) for r in g) for g in self.members)
        object.__setattr__(self, "members", members)
        if not members or not members[0]:
            raise ValueError(f"groups {self.name!r}: need at least one group of at least one rank")
        sizes = {len(g) for g in members}
        if len(sizes) != 1:
            raise ValueError(f"groups {self.name!r}: every group must hold the same number of ranks (a ring of n), "
                             f"got sizes {sorted(sizes)}")
        flat = sorted(r for g in members for r in g)
        if flat != list(range(len(flat))):
            raise ValueError(f"groups {self.name!r} must list every rank 0..{len(flat) - 1} exactly once (each rank "
                             "runs in one group of a kind)")

    # -- what a group is ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """n: ranks in each group (the ring's length)."""
        return len(self.members[0])

    @property
    def count(self) -> int:
        """How many groups (rings) run side by side."""
        return len(self.members)

    @property
    def world_size(self) -> int:
        """N: ranks in all the groups together."""
        return self.size * self.count

    @functools.cached_property  # asked on every collective: compared once
    def is_world(self) -> bool:
        """One group of every rank in rank order: the flat cluster's ring."""
        return self.count == 1 and self.members[0] == tuple(range(self.size))

    @functools.cached_property
    def _where(self) -> tuple:
        """(group index per rank, position per rank): two (N,) int arrays."""
        group = np.empty(self.world_size, dtype=np.int64)
        position = np.empty(self.world_size, dtype=np.int64)
        for g, ranks in enumerate(self.members):
            group[list(ranks)] = g
            position[list(ranks)] = np.arange(len(ranks))
        return group, position

    def index(self, rank: int) -> int:
        """Which group `rank` runs in."""
        return int(self._where[0][rank])

    def position(self, rank: int) -> int:
        """`rank`'s place in its group's ring (0..n-1): the chunk it ends up owning in a reduce-scatter."""
        return int(self._where[1][rank])

    def group_of(self, rank: int) -> tuple:
        """The ranks of `rank`'s group, in ring order."""
        return self.members[self.index(rank)]

    def next(self, rank: int) -> int:
        """The rank `rank` sends to on its ring."""
        g = self.group_of(rank)
        return g[(self.position(rank) + 1) % len(g)]

    def prev(self, rank: int) -> int:
        """The rank `rank` receives from on its ring."""
        g = self.group_of(rank)
        return g[(self.position(rank) - 1) % len(g)]

    def shifted(self, shift: int) -> tuple:
        """(N,) the rank each rank reaches `shift` places on along its ring (negative: back; `next` for 1, `prev` for
        -1), made once a shift: a context-parallel ring's send/recv asks it of every rank a meta representative
        stands for, in thousands of calls a step (collectives/_send_recv.py)."""
        made = self._shifts.get(shift)
        if made is None:
            made = self._shifts[shift] = tuple(g[(p + shift) % len(g)] for g, p in zip(
                map(self.group_of, range(self.world_size)), self._where[1].tolist()))
        return made

    @functools.cached_property
    def _shifts(self) -> dict:
        """shift -> `shifted(shift)`, as each is first asked for."""
        return {}

    @functools.cached_property
    def positions(self) -> np.ndarray:
        """(N,) every rank's position in its group (read-only)."""
        out = self._where[1].copy()
        out.flags.writeable = False
        return out

    @functools.cached_property
    def ring_order(self) -> tuple:
        """(ranks 0..N-1, each one's position on its ring, the rank each sends to): three (N,) tuples, what a ring
        phase's record of its sends reads (cluster/_hops.py)."""
        ranks = tuple(range(self.world_size))
        return ranks, tuple(self.position(r) for r in ranks), tuple(self.next(r) for r in ranks)

    @functools.cached_property
    def members_array(self) -> np.ndarray:
        """(groups, n) int64, read-only: `members` as an array (rank at [g, p])."""
        out = np.asarray(self.members, dtype=np.int64).reshape(self.count, self.size)
        out.flags.writeable = False
        return out

    def crossing_count(self, gpus_per_node: int | None) -> int:
        """How many ranks' sends to their ring's next rank cross nodes (`send_tiers`' True count), found once."""
        key = ("count", gpus_per_node)
        if key not in self._tiers:
            self._tiers[key] = int(self.send_tiers(gpus_per_node).sum())
        return self._tiers[key]

    @functools.cached_property
    def _tiers(self) -> dict:
        return {}  # gpus_per_node -> send_tiers' answer, and ("count" or "tier", gpus_per_node) -> those answers
        #            (hashing N members on every call would cost O(N))

    def send_tiers(self, gpus_per_node: int | None) -> np.ndarray:
        """(N,) bool, read-only: True where rank r's send to the next rank of its ring crosses nodes."""
        out = self._tiers.get(gpus_per_node)
        if out is None:
            out = np.zeros(self.world_size, dtype=bool)
            for g in self.members if gpus_per_node is not None else ():
                here = np.asarray(g) // gpus_per_node
                out[list(g)] = here != np.roll(here, -1)
            out.flags.writeable = False
            self._tiers[gpus_per_node] = out
        return out

    def tier(self, gpus_per_node: int | None) -> str:
        """"inter-node" if any hop of any ring leaves a node (that ring runs at the slower link), else
        "intra-node"; found once (every call over the groups asks it: ~18,000 calls a zerosim validate)."""
        key = ("tier", gpus_per_node)
        found = self._tiers.get(key)
        if found is None:
            found = self._tiers[key] = INTER if bool(self.send_tiers(gpus_per_node).any()) else INTRA
        return found

    def nodes_spanned(self, gpus_per_node: int | None) -> int:
        """The most nodes any one group spans."""
        if gpus_per_node is None:
            return 1
        return max(len({r // gpus_per_node for r in g}) for g in self.members)

    def __repr__(self) -> str:
        shown = " ".join("(" + " ".join(map(str, g)) + ")" for g in self.members[:4])
        more = f" ... {self.count - 4} more" if self.count > 4 else ""
        return f"Groups({self.name!r}: {self.count} of {self.size}: {shown}{more})"

    # -- the usual ones ----------------------------------------------------------------------------
    @classmethod
    def world(cls, n: int) -> "Groups":
        """Every rank in one ring, in rank order: the flat cluster."""
        return _world(_positive(n, "world size"))

    @classmethod
    def blocks(cls, n: int, size: int, name: str = "shard") -> "Groups":
        """Consecutive blocks of `size` ranks: (0..size-1) (size..2·size-1) ... — FSDP2's shard dim of a (N/size,
        size) mesh, DeepSpeed MiCS's shard groups (mics_utils.py, `_generate_mics_config`) and hpZ's groups
        (deepspeed/utils/groups.py, `_create_zero_param_parallel_group`)."""
        return Mesh.of(n, size).groups("shard").renamed(name)

    @classmethod
    def strided(cls, n: int, size: int, name: str = "replicate") -> "Groups":
        """The ranks that hold the same position in their block of `size`: (0, size, 2·size, ...) (1, size+1, ...)
        — FSDP2's replicate dim, MiCS's replicate groups."""
        return Mesh.of(n, size).groups("replicate").renamed(name)

    def renamed(self, name: str) -> "Groups":
        return self if name == self.name else Groups(name, self.members)


@functools.lru_cache(maxsize=64)
def _world(n: int) -> Groups:
    return Groups("world", (tuple(range(n)),))


@dataclass(frozen=True)
class Mesh:
    """N = prod(shape) ranks laid out row-major in `shape`, each dim with a name — torch's DeviceMesh
    (`init_device_mesh("cuda", (2, 4), mesh_dim_names=("replicate", "shard"))`): rank r sits at the coordinates
    `np.unravel_index(r, shape)`; a dim's groups are the ranks that differ only along it."""

    shape: tuple  # sizes of the dims, e.g. (nodes, gpus per node)
    dim_names: tuple  # one name per dim, e.g. ("node", "gpu")

    def __post_init__(self):
        shape = tuple(_positive(s, "a mesh dim's size") for s in self.shape)
        names = tuple(self.dim_names)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dim_names", names)
        if len(names) != len(shape) or len(set(names)) != len(names) or not all(isinstance(x, str) for x in names):
            raise ValueError(f"a mesh needs one distinct name per dim: shape {shape}, dim_names {names}")

    @classmethod
    def of(cls, n: int, inner: int, names: tuple = ("replicate", "shard")) -> "Mesh":
        """The (N / inner, inner) mesh; `inner` must divide N."""
        n, inner = _positive(n, "world size"), _positive(inner, "group size")
        if n % inner:
            raise ValueError(f"a group of {inner} ranks does not divide {n} ranks into equal groups")
        return cls((n // inner, inner), names)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def coordinates(self, rank: int) -> tuple:
        """rank -> its coordinates, one per dim."""
        return tuple(int(i) for i in np.unravel_index(rank, self.shape))

    def groups(self, dim: str) -> Groups:
        """The groups along dim `dim` (by name): torch's `mesh.get_group(dim)`, for every rank at once."""
        return _groups_along(self, dim)

    def __repr__(self) -> str:
        return "Mesh(" + " × ".join(f"{s} {d}" for s, d in zip(self.shape, self.dim_names)) + ")"


@functools.lru_cache(maxsize=256)
def _groups_along(mesh: Mesh, dim: str) -> Groups:
    if dim not in mesh.dim_names:
        raise ValueError(f"{mesh!r} has no dim {dim!r}; its dims are {mesh.dim_names}")
    axis = mesh.dim_names.index(dim)
    ranks = np.moveaxis(np.arange(mesh.size).reshape(mesh.shape), axis, -1).reshape(-1, mesh.shape[axis])
    return Groups(dim, tuple(tuple(row) for row in ranks.tolist()))
