"""Print what this machine offers the GPU backends (run on the GPU machine)."""

from __future__ import annotations

import cuda.bindings
import numpy as np

from dask_hwdecomp.decompress import hardware, nvcomp
from dask_hwdecomp.gpu.device import Device
from dask_hwdecomp.gpu.errors import CudaError
from dask_hwdecomp.gpu.hwengine import PARAMS_DTYPE, EngineDriver, _v2_driver
from dask_hwdecomp.gpu.nvcomp_lib import FORMATS, NvcompLib, find_library

print("cuda-bindings", cuda.bindings.__version__, "_v2:", _v2_driver() is not None)
print("probe nvcomp:", nvcomp.probe())
print("probe hardware:", hardware.probe())
lib = NvcompLib(find_library())
for fmt in FORMATS:
    print("nvcomp", fmt, "alignments (in, out, temp):", lib.alignments(fmt))
with Device(0) as dev:
    dev.activate()
    drv = EngineDriver(dev, 1 << 26)
    print("engine mask", drv.mask, "max length", drv.max_length, "entry", drv.entry_point)
    stream = drv.new_stream()
    mem = drv.alloc_device(1 << 20, stream)
    params = np.zeros(1, dtype=PARAMS_DTYPE)
    params["src_num_bytes"], params["dst_num_bytes"] = 16, 16
    params["src"], params["dst"], params["dst_act_bytes"] = mem.ptr, mem.ptr + 4096, mem.ptr + 8192
    params["algo"] = 2
    for label, v2 in (("_v2", drv._v2), ("classic", None)):
        drv._v2 = v2
        if label == "_v2" and v2 is None:
            continue
        try:
            drv.batch_decompress(params, stream)
            stream.synchronize()
            print("engine call", label, "succeeded")
        except CudaError as exc:
            print("engine call", label, "raised:", exc, "code", exc.code)
    mem.close()
    stream.synchronize()
    stream.close()
    drv.close()
