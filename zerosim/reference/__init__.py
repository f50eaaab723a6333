"""The single-device oracle and the worked-example replay."""

from zerosim.reference.oracle import Reference
from zerosim.reference.replay import replay, replay_live
from zerosim.reference.replay_text import narrate

__all__ = ["Reference", "narrate", "replay", "replay_live"]
