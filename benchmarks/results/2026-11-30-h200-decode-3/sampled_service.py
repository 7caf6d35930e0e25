"""The GPU service in this process with a sampling profiler: where its threads are, every 2 ms."""
import collections, os, re, sys, threading, time, signal
from dask_hwdecomp.service.client import GPU_FACTORIES
from dask_hwdecomp.service.rundir import address_for
from dask_hwdecomp.service.main import run

address = address_for(GPU_FACTORIES)
if address.gpu != "none":
    os.environ["CUDA_VISIBLE_DEVICES"] = address.gpu
counts = collections.Counter()
groups = collections.Counter()
stop = threading.Event()
active = threading.Event()

def group(name):
    return re.sub(r"-\d+(-\d+)?$", "", name)

def sampler():
    me = threading.get_ident()
    while not stop.is_set():
        time.sleep(0.002)
        if not active.is_set() and not os.path.exists("/tmp/sample-on"):
            continue
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            g = group(names.get(ident, "?"))
            inner = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
            ours = None
            f = frame
            while f is not None:
                if "dask_hwdecomp" in f.f_code.co_filename:
                    ours = f"{os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}:{f.f_lineno}"
                    break
                f = f.f_back
            counts[(g, ours, inner)] += 1
            groups[g] += 1

t = threading.Thread(target=sampler, daemon=True); t.start()
try:
    run(address, idle_s=2.0, persist=True)
finally:
    stop.set()
    total = sum(groups.values())
    print("samples by thread group:", dict(groups.most_common()), flush=True)
    idle = ("threading.py:wait", "socket.py", "wire.py:_recv_exact", "queue.py:get")
    for (g, ours, inner), n in counts.most_common(60):
        print(f"{n:7d}  {g:28s} {ours}  <- {inner}")
