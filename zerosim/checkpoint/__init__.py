"""Sharded checkpoints: save and resume every stage, consolidate to one fp32 file, reshard from N to M ranks.

    files        safetensors files written atomically, XXH3-64 checksums, bf16/fp8 stored as their bits
    manifest     what a checkpoint records (model, layout, precision, optimizer, step, files)
    save         engine.save(DIR): one file per rank, the manifest, DIR/latest
    load         ZeroEngine.load(DIR, cluster, model, ...): check everything, then rebuild at any N, stage
    consolidate  one unsharded fp32 file (zero_to_fp32's job), and `inspect`
    folders      which folders are checkpoints: `latest`, complete and incomplete tags, a killed save's leftovers
    manifest_checks  every key of a manifest checked, naming the file and the key
    resume       the resume rule: what a resume leaves out is the saved run's (its settings, read here)
"""

from zerosim.checkpoint.consolidate import consolidate, consolidated, inspect
from zerosim.checkpoint.files import CheckpointError
from zerosim.checkpoint.load import SavedState, load, read_state
from zerosim.checkpoint.resume import saved_optimizer, saved_settings
from zerosim.checkpoint.save import save

__all__ = ["CheckpointError", "SavedState", "consolidate", "consolidated", "inspect", "load", "read_state", "save",
           "saved_optimizer", "saved_settings"]
