"""Teaching: a learner writes a piece of ZeRO and the package's own checks grade it.

    exercises/     six small functions (the ring's chunk index, a shard's offset, the stage-2 free, ...), each graded
                   against the oracle or the naive twin, with the first counterexample
    assignments/   three week-sized assignments with an autograder (Gradescope's results.json)

The learning path through the notebooks, commands, exercises and assignments is in the docs (docs/tutorials/).
"""
