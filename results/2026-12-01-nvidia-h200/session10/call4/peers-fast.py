# peers.py with the two backends the issues compare against (FlashAttention-2 and cuDNN through PyTorch).
import os, runpy, sys
sys.argv += ["--backends", "flash,cudnn"]
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers.py"), run_name="__main__")
