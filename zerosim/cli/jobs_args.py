"""The flag that spreads a long command's independent pieces over worker processes; `zerosim plan` (each strategy of a
stage beside each combination of degrees), `zerosim validate` (each published point) and `zerosim figures` (each
figure) call these.

    --jobs N        N worker processes (analysis/planner/_jobs.py): the same output, byte for byte, in less wall time
    --jobs auto     one a core this process may run on; 1, the default: this process alone
"""

from __future__ import annotations


def add_jobs_argument(p, pieces: str) -> None:
    """--jobs, whose help names what `pieces` of the command's work the workers take ("each predicting a point ...")."""
    p.add_argument("--jobs", default="1", metavar="N",
                   help=f"worker processes to run on, {pieces}: the same output in less wall time (default 1; auto: "
                        "every core)")


def jobs_from_args(args) -> int:
    """The worker processes --jobs asks for, checked (an integer of at least 1, or auto; a clear error naming the flag
    otherwise), before anything runs."""
    from zerosim.analysis.planner import check_jobs

    text = args.jobs
    try:
        value = text if text == "auto" else int(text)
    except ValueError:
        value = text  # check_jobs names it
    return check_jobs(value, "--jobs")
