"""Command-line pieces both examples use (argparse only, so serve.py stays free of model code)."""
import argparse


class HelpWithDefaults(argparse.RawDescriptionHelpFormatter):
    """The module docstring as written; each option's default after its help."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default not in (None, argparse.SUPPRESS):
            shown = repr(action.default) if isinstance(action.default, str) else action.default
            text += f" (default: {shown})"
        return text


def int_in(low, high=None):
    """An argparse type: an integer in [low, high] (no upper bound when high is None)."""

    def parse(text):
        value = int(text)
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"must be an integer {bound}; got {value}")
        return value

    return parse
