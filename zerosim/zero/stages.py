"""The four stages by number."""

from zerosim.zero.stage0 import Stage0
from zerosim.zero.stage1 import Stage1
from zerosim.zero.stage2 import Stage2
from zerosim.zero.stage3 import Stage3

STAGES = {0: Stage0, 1: Stage1, 2: Stage2, 3: Stage3}
