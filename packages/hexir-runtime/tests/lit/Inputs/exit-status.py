"""Run a command, pass its stderr then stdout through, then print `exit <status>`.

lit's internal shell has no `$?`; this lets a test check the exact exit status (2 for bad
arguments, 1 for failures) next to the message.
"""

import subprocess
import sys

done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stderr + done.stdout)
print(f"exit {done.returncode}")
