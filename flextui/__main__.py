import sys

from flextui.cli import main

sys.exit(main())
