# peers.py with FlashAttention-2 and FlexAttention (the masks' peer).
import os, runpy, sys
sys.argv += ["--backends", "flash,flex"]
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers.py"), run_name="__main__")
