import sys
from pathlib import Path

# Lets tests import the shared reference helpers as ``reference``.
sys.path.insert(0, str(Path(__file__).parent))
