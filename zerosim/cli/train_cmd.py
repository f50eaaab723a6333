"""Train an MLP on a small synthetic task with any ZeRO stage, rank count, precision and optimizer.

Prints the loss as it goes (with a progress bar), then per-rank peak memory and bytes communicated.
"""

HELP = "train an MLP on a synthetic task (stage, ranks, precision, optimizer, steps)"


def add_arguments(p) -> None:
    pass


def run(args) -> int:
    raise NotImplementedError
