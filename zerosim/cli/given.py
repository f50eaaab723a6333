"""Whether the user gave a flag: argparse leaves a value flag that was not given None and a switch False.

    given(args.link_alpha)        True for `--link-alpha 0`: a value of 0 is given

Not `value not in (None, False)`: 0 == False (and 0.0), so that test took `--virtual-stages 0`, `--link-alpha 0` or
`--save-every 0` for a flag left out, and the flag was never checked.
"""


def given(value) -> bool:
    """True unless `value` is None or False itself (argparse's defaults for a flag not given)."""
    return value is not None and value is not False
