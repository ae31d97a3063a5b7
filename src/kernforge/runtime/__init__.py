"""runtime: what an installed kernel needs to run, with torch alone (and triton for Triton kernels).

kernforge's `patch` and `apply` install kernels through it, and `kernforge export` copies this
folder, as it is, into every exported package (PACKAGE/runtime/), so that a package installs the
same way without kernforge. Its modules therefore import each other only relatively and nothing
of kernforge outside this folder (tests/test_layers.py reads that from the source):

    router.py      an ATen op routed to a proved kernel where its guard holds, else the original
    kernels.py     a proved kernel as the routers hold it: its spec, guard, custom op and counts
    fused.py       a fused chain installed in place of its ATen calls, or at its modules
    dispatch.py    the guard and launch in C++ (dispatch.cpp, built against the torch that runs)
    loader.py      an exported package's files checked and its kernels loaded and installed
    loading.py     what the runtime knows of a backend: plain data, carried in a manifest
    native_abi.py  the C ABI of compiled kernels, through ctypes
    importing.py   a Python file imported by its path (a Triton kernel)
"""
