"""Stage 0, plain data parallel: all-reduce the gradients; every rank keeps everything."""

from __future__ import annotations

from zerosim.zero.stage_base import Stage


class Stage0(Stage):
    number = 0

    def reduce_gradients(self) -> None:
        self.all_reduce_gradients()

    def refresh_params(self) -> None:
        pass  # every rank ran the same update on the same full buffer
