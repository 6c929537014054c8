"""The report's first stage: reading the result files, each checked, into :class:`Inputs`."""

from .files import ReportInputError
from .inputs import Inputs, load_inputs, load_not_measured
from .profiles import Profile, load_profile
from .references import Reference, discover_reference, load_reference
from .runs import KernelBandwidth, LaunchSet, Run, load_launch_set, load_run

__all__ = [
    "Inputs",
    "KernelBandwidth",
    "LaunchSet",
    "Profile",
    "Reference",
    "ReportInputError",
    "Run",
    "discover_reference",
    "load_inputs",
    "load_launch_set",
    "load_not_measured",
    "load_profile",
    "load_reference",
    "load_run",
]
