"""Is there an NVIDIA GPU? Asks the CUDA driver itself (libcuda.so.1, or the library given),
through ctypes, as hbm's CUDA backend does: cuInit, the device count, then device 0's name,
memory and the driver's version. Used by scripts/gpu-check.sh for its first line.

Usage: python3 probe.py [LIBCUDA]
Prints one JSON object; exit status 0 with a GPU, 3 without (with the reason)."""
import ctypes
import json
import sys


def error_name(cuda, code):
    name = ctypes.c_char_p()
    try:
        if cuda.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return name.value.decode()
    except AttributeError:
        pass
    return f"error {code}"


def probe(path):
    try:
        cuda = ctypes.CDLL(path)
    except OSError as e:
        return {"gpu": False, "reason": f"no CUDA driver: {e}"}
    code = cuda.cuInit(0)
    if code != 0:
        return {"gpu": False, "reason": f"cuInit: {error_name(cuda, code)}"}
    count = ctypes.c_int(0)
    code = cuda.cuDeviceGetCount(ctypes.byref(count))
    if code != 0 or count.value == 0:
        return {"gpu": False, "reason": "the CUDA driver found no device" if code == 0
                else f"cuDeviceGetCount: {error_name(cuda, code)}"}
    dev, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
    total, version = ctypes.c_size_t(0), ctypes.c_int(0)
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDeviceGetName(name, 255, dev)
    cuda.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    found = {"gpu": True, "devices": count.value, "name": name.value.decode(errors="replace"),
             "total_bytes": total.value, "driver_version": version.value, "driver": path}
    found["line"] = (f"{found['name']}, {total.value / 2**30:.1f} GiB, CUDA driver "
                     f"{version.value // 1000}.{version.value % 1000 // 10} ({path}), "
                     f"{count.value} device(s)")
    return found


def main(argv):
    result = probe(argv[1] if len(argv) > 1 else "libcuda.so.1")
    print(json.dumps(result))
    return 0 if result["gpu"] else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
