"""Test-wide settings: tests write only under pytest's temporary paths.

Hypothesis would otherwise keep its example database in ./.hypothesis; it is switched off here.
"""

from hypothesis import settings

settings.register_profile("pylog", database=None, deadline=None)
settings.load_profile("pylog")
