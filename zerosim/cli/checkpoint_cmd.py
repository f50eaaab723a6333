"""Look into a sharded checkpoint, or turn it into one unsharded fp32 file.

    zerosim checkpoint inspect DIR               who owns which range of the flat vector, padding, bytes per file
    zerosim checkpoint consolidate DIR OUT       one safetensors file: fp32 weights and optimizer state per parameter

DIR is a checkpoint folder (with manifest.json) or the folder `zerosim train --save` wrote (its `latest`).
"""

from __future__ import annotations

HELP = "inspect a sharded checkpoint, or consolidate it into one fp32 file (zero_to_fp32's job)"


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect = sub.add_parser("inspect", help="print the layout: owners, padding, bytes per file")
    inspect.add_argument("dir")
    inspect.add_argument("--tag", default=None, help="a checkpoint tag inside DIR (default: the latest)")
    consolidate = sub.add_parser("consolidate", help="write one unsharded fp32 safetensors file")
    consolidate.add_argument("dir")
    consolidate.add_argument("out")
    consolidate.add_argument("--tag", default=None, help="a checkpoint tag inside DIR (default: the latest)")


def run(args) -> int:
    from zerosim.checkpoint import consolidate, inspect

    if args.action == "inspect":
        print(inspect(args.dir, args.tag))
        return 0
    tensors = consolidate(args.dir, args.out, args.tag)
    total = sum(v.nbytes for v in tensors.values())
    print(f"wrote {args.out}: {len(tensors)} tensors, {total:,} bytes (fp32 weights and optimizer state, unpadded)")
    return 0
