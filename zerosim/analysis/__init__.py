"""Analysis beside the simulator: formulas, time, the planner, and numerics against exact arithmetic. Each reads what
the engines record (ledgers, the trace) or runs them on the meta backend; the engines never import it.

    costs/      memory, activations and communication per rank: formulas and meta-backend measurements
    timeline/   time on the recorded events: compute and communication streams, overlap, exposed communication
    planner/    which configuration fits and how fast: sweeps over N, stages, strategies and micro-batches
    numerics/   each recipe's and mesh's average against float64; underflow; 16-bit state side by side
    reports/    what `zerosim memory`, `timeline` and `plan` say, as records (their --json is each one's to_dict)
"""
