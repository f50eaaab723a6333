"""Sharded checkpoints: save and resume every stage, consolidate to one fp32 file, reshard from N to M ranks.

    files        safetensors files written atomically, XXH3-64 checksums, bf16/fp8 stored as their bits
    manifest     what a checkpoint records (model, layout, precision, optimizer, step, files)
    save         save(engine, DIR): one file per rank, the manifest, DIR/latest
    load         load(DIR, cluster, model, ...): check everything, then an engine at any N and stage

As torch.distributed.checkpoint does, the checkpoint code sits above the engine and is never imported by
it: `save` reads an engine's states, `load` builds an engine that takes the loaded states through its one
`states=` argument.
    consolidate  one unsharded fp32 file (zero_to_fp32's job), and `inspect`
    folders      which folders are checkpoints: `latest`, complete and incomplete tags, a killed save's leftovers
    manifest_checks  every key of a manifest checked, naming the file and the key
    resume       the resume rule: what a resume leaves out is the saved run's (its settings, read here)
    runs         whose checkpoints a folder holds: a save into another run's folder is refused, naming both
    replicas     a mesh run (HSDP, MiCS): replicas checked equal, each shard written once by replica 0
"""

from zerosim.checkpoint._consolidate import consolidate, consolidated, inspect
from zerosim.checkpoint._files import CheckpointError
from zerosim.checkpoint._load import SavedState, load, read_state
from zerosim.checkpoint._resume import saved_data, saved_optimizer, saved_settings
from zerosim.checkpoint._save import check_save, save

__all__ = ["CheckpointError", "SavedState", "check_save", "consolidate", "consolidated", "inspect", "load",
           "read_state", "save", "saved_data", "saved_optimizer", "saved_settings"]
