// kernforge's native dispatch: an installed kernel guarded and launched from C++ (dispatch.py).
//
// Two things, both built on the user's machine against the torch that runs there:
//  - Entry: an installed kernel's call without Python. A compiled library's kf_forward called
//    through its function pointer, or a Triton kernel's recorded launches replayed with
//    cuLaunchKernel on the current stream (allocations through torch's caching allocator, no
//    host sync: a CUDA graph can capture it).
//  - Router: a boxed kernel on an ATen op's dispatch key that checks the proved calls' guards
//    on the dispatcher's stack and runs the matching entry, else the kernel that served the key
//    before kernforge (the original); calls carrying the Python key (fake tensors while
//    torch.compile traces, subclasses) go to the kernel registered just before this one (the
//    Python router, which knows what to do with them).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------- entries

constexpr int kMaxDims = 8;  // native_abi.MAX_DIMS

struct KfTensor {  // native_abi.KfTensor, field for field
  void* data;
  int64_t ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  int32_t dtype;
};
using KfForward = int (*)(const KfTensor*, int, KfTensor*, int);
using CuLaunchKernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               void*, void**, void**);

c10::ScalarType dtype_of(const py::handle& obj) {
  if (!THPDtype_Check(obj.ptr())) throw std::runtime_error("expected a torch.dtype");
  return reinterpret_cast<THPDtype*>(obj.ptr())->scalar_type;
}

struct Alloc {  // an output or a workspace, allocated per call
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
};

struct Param {  // one kernel parameter: a pointer into a tensor, or constant bytes
  int source;   // 0: input tensor, 1: allocation, 2: constant
  int index;
  int64_t offset;  // bytes past the tensor's data pointer
  uint64_t bits;   // the constant's bytes (little end first)
};

struct Launch {
  void* function;  // a CUfunction Triton loaded in this process
  unsigned grid[3];
  unsigned threads;
  unsigned shared;
  std::vector<Param> params;
};

struct Step {  // what a call does, in order: fill an allocation, or launch
  int kind;  // 0: fill allocation `index` with `value`, 1: launch `index`
  int index;
  double value;
};

CuLaunchKernel cu_launch_kernel() {
  static CuLaunchKernel fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
    return lib ? reinterpret_cast<CuLaunchKernel>(dlsym(lib, "cuLaunchKernel")) : nullptr;
  }();
  return fn;
}

void* current_stream(const c10::Device& device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
}

class Entry {
 public:
  Entry(int kind, c10::Device device, std::vector<Alloc> allocs, std::vector<int> outputs,
        std::vector<Launch> launches, std::vector<Step> steps, uintptr_t library_fn)
      : kind_(kind), device_(device), allocs_(std::move(allocs)), outputs_(std::move(outputs)),
        launches_(std::move(launches)), steps_(std::move(steps)),
        library_fn_(reinterpret_cast<KfForward>(library_fn)) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const {
    c10::OptionalDeviceGuard guard;
    if (device_.is_cuda()) guard.reset_device(device_);
    std::vector<at::Tensor> made;
    made.reserve(allocs_.size());
    auto options = at::TensorOptions().device(device_);
    for (const auto& a : allocs_) made.push_back(at::empty_strided(a.sizes, a.strides, options.dtype(a.dtype)));
    if (kind_ == 1) {
      call_library(inputs, made);
    } else {
      void* stream = current_stream(device_);
      for (const auto& step : steps_) {
        if (step.kind == 0) made[step.index].fill_(step.value);
        else launch(launches_[step.index], inputs, made, stream);
      }
    }
    std::vector<at::Tensor> out;
    out.reserve(outputs_.size());
    for (int i : outputs_) out.push_back(made[i]);
    return out;
  }

 private:
  void call_library(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const {
    // the CUDA ABI launches on the default stream: on any other it would race (runtime._runnable_here)
    TORCH_CHECK(!device_.is_cuda() || current_stream(device_) == nullptr,
                "kernforge: a CUDA library kernel runs on the default stream only");
    std::vector<KfTensor> in(std::max<size_t>(1, inputs.size())), out(std::max<size_t>(1, outputs.size()));
    for (size_t i = 0; i < inputs.size(); ++i) in[i] = as_struct(inputs[i]);
    for (size_t i = 0; i < outputs.size(); ++i) out[i] = as_struct(outputs[i]);
    int code = library_fn_(in.data(), static_cast<int>(inputs.size()), out.data(), static_cast<int>(outputs.size()));
    TORCH_CHECK(code == 0, "kf_forward returned error code ", code);
  }

  static KfTensor as_struct(const at::Tensor& t) {
    KfTensor s{};
    s.data = t.data_ptr();
    s.ndim = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) {
      s.sizes[d] = t.size(d);
      s.strides[d] = t.stride(d);
    }
    switch (t.scalar_type()) {  // native_abi.DTYPE_CODES
      case at::kFloat: s.dtype = 0; break;
      case at::kDouble: s.dtype = 1; break;
      case at::kHalf: s.dtype = 2; break;
      case at::kBFloat16: s.dtype = 3; break;
      case at::kInt: s.dtype = 4; break;
      case at::kLong: s.dtype = 5; break;
      case at::kBool: case at::kByte: s.dtype = 6; break;
      case at::kChar: s.dtype = 7; break;
      default: TORCH_CHECK(false, "kernforge: no C type for ", t.scalar_type());
    }
    return s;
  }

  static void launch(const Launch& l, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& made,
                     void* stream) {
    static const CuLaunchKernel cu = cu_launch_kernel();
    TORCH_CHECK(cu != nullptr, "kernforge: libcuda.so.1 has no cuLaunchKernel");
    // Every parameter's bytes in one slot of 8, and one pointer to each: the driver reads the
    // kernel's declared parameter sizes from these. Two trailing null slots: Triton's kernels
    // take a global and a profile scratch pointer after their own (none is used: dispatch.py
    // refuses kernels that need scratch), and the driver reads no more slots than the kernel has.
    const size_t n = l.params.size() + 2;
    uint64_t slots[64];
    void* pointers[64];
    TORCH_CHECK(n <= 64, "kernforge: a kernel of more than 62 parameters");
    for (size_t i = 0; i < l.params.size(); ++i) {
      const Param& p = l.params[i];
      if (p.source == 2) {
        slots[i] = p.bits;
      } else {
        const at::Tensor& t = p.source == 0 ? inputs[p.index] : made[p.index];
        slots[i] = reinterpret_cast<uint64_t>(static_cast<char*>(t.data_ptr()) + p.offset);
      }
      pointers[i] = &slots[i];
    }
    slots[n - 2] = slots[n - 1] = 0;
    pointers[n - 2] = &slots[n - 2];
    pointers[n - 1] = &slots[n - 1];
    int code = cu(l.function, l.grid[0], l.grid[1], l.grid[2], l.threads, 1, 1, l.shared, stream, pointers, nullptr);
    TORCH_CHECK(code == 0, "kernforge: cuLaunchKernel failed with CUresult ", code);
  }

  int kind_;  // 0: Triton launches, 1: a library's kf_forward
  c10::Device device_;
  std::vector<Alloc> allocs_;
  std::vector<int> outputs_;
  std::vector<Launch> launches_;
  std::vector<Step> steps_;
  KfForward library_fn_;
};

// ---------------------------------------------------------------------------- guards

struct Check {  // one schema argument as proved
  int kind;  // 0 tensor, 1 None, 2 bool, 3 int, 4 float, 5 int list, 6 dtype, 7 str, 8 anything (a filter's)
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes, strides;
  c10::DeviceType device_type = c10::DeviceType::CPU;
  std::vector<int> device_indices;
  int64_t align = 1;  // elements
  int64_t int_value = 0;
  double float_value = 0.0;
  std::vector<int64_t> ints;
  std::string text;
};

bool plain_tensor_as_proved(const Check& c, const at::Tensor& t, bool grad_wanted) {
  if (!t.defined() || t.scalar_type() != c.dtype || t.device().type() != c.device_type) return false;
  if (t.sizes() != c10::IntArrayRef(c.sizes) || t.strides() != c10::IntArrayRef(c.strides)) return false;
  if (t.storage_offset() % c.align != 0 || t.layout() != c10::kStrided) return false;
  const auto keys = t.key_set();
  if (keys.has(c10::DispatchKey::Python) || keys.has(c10::DispatchKey::Functionalize)) return false;
  if (grad_wanted && t.requires_grad()) return false;
  if (c.device_type == c10::DeviceType::CUDA) {
    int index = t.device().index();
    bool allowed = false;
    for (int i : c.device_indices) allowed = allowed || i == index;
    if (!allowed) return false;
  }
  return true;
}

// A Python number where the schema takes a Tensor (`x * 0.125` reaching mul.Tensor) is on the
// stack as a 0-dim wrapped-number tensor; the Python router is handed the number itself.
bool wrapped_number_is(const c10::IValue& v, double value) {
  if (!v.isTensor()) return false;
  const at::Tensor& t = v.toTensor();
  if (!t.defined() || !t.unsafeGetTensorImpl()->is_wrapped_number() || !t.device().is_cpu()) return false;
  switch (t.scalar_type()) {  // read in place: item() would be a dispatcher call of its own
    case at::kDouble: return *static_cast<const double*>(t.const_data_ptr()) == value;
    case at::kLong: return static_cast<double>(*static_cast<const int64_t*>(t.const_data_ptr())) == value;
    case at::kBool: return static_cast<double>(*static_cast<const bool*>(t.const_data_ptr())) == value;
    default: return false;
  }
}

bool matches(const Check& c, const c10::IValue& v, bool grad_wanted, std::vector<at::Tensor>& tensors) {
  switch (c.kind) {
    case 0:
      if (!v.isTensor() || !plain_tensor_as_proved(c, v.toTensor(), grad_wanted)) return false;
      tensors.push_back(v.toTensor());
      return true;
    case 1: return v.isNone();
    case 2: return v.isBool() ? v.toBool() == (c.int_value != 0) : wrapped_number_is(v, static_cast<double>(c.int_value));
    case 3: return v.isInt() ? v.toInt() == c.int_value : wrapped_number_is(v, static_cast<double>(c.int_value));
    case 4: return v.isDouble() ? v.toDouble() == c.float_value : wrapped_number_is(v, c.float_value);
    case 5: {
      if (!v.isIntList()) return false;
      auto list = v.toIntList();
      if (list.size() != c.ints.size()) return false;
      for (size_t i = 0; i < c.ints.size(); ++i)
        if (list.get(i) != c.ints[i]) return false;
      return true;
    }
    case 6: return v.isInt() && static_cast<c10::ScalarType>(v.toInt()) == c.dtype;
    case 7: return v.isString() && v.toStringRef() == c.text;
    case 8: return true;  // only in a route without an entry: the Python router checks it
    default: return false;
  }
}

struct Route {
  std::vector<Check> checks;  // one per schema argument
  // null for a chain's step: a call that may start (or continue) the chain goes on to the Python
  // router, which binds it to the chain's run and returns placeholders (fused.py); only calls
  // that cannot are kept from Python
  std::shared_ptr<Entry> entry;
  bool default_stream_only = false;  // a CUDA library's kf_forward: on another stream, the next route
};

struct Counts {
  std::vector<std::atomic<int64_t>> kernel;  // per route
  std::atomic<int64_t> fallback{0};
  explicit Counts(size_t n) : kernel(n) {}
};

class RouterKernel final : public c10::OperatorKernel {
 public:
  RouterKernel(std::vector<Route> routes, c10::SafeKernelFunction original, c10::SafeKernelFunction python_router,
               std::shared_ptr<Counts> counts)
      : routes_(std::move(routes)), original_(std::move(original)), python_router_(std::move(python_router)),
        counts_(std::move(counts)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    if (keys.has(c10::DispatchKey::Python) || keys.has(c10::DispatchKey::PythonTLSSnapshot)) {
      return python_router_.callBoxed(op, keys, stack);  // it counts these calls itself
    }
    const size_t n = op.schema().arguments().size();
    auto args = torch::jit::last(*stack, n);
    // on the backend key too: the autograd kernel the Autograd key fell back to redispatches here
    // with grad mode on, and the op must run as the original, whose backward autograd recorded
    const bool grad_wanted = at::GradMode::is_enabled();
    std::vector<at::Tensor> tensors;
    for (size_t r = 0; r < routes_.size(); ++r) {
      const Route& route = routes_[r];
      tensors.clear();
      bool ok = route.checks.size() == n;
      for (size_t i = 0; ok && i < n; ++i) ok = matches(route.checks[i], args[i], grad_wanted, tensors);
      if (!ok) continue;
      if (!route.entry) return python_router_.callBoxed(op, keys, stack);  // it counts these calls itself
      if (route.default_stream_only && !tensors.empty() && tensors[0].is_cuda() &&
          current_stream(tensors[0].device()) != nullptr)
        continue;  // it would race the stream the caller is on (a CUDA graph's capture, a side stream)
      auto out = route.entry->run(tensors);
      counts_->kernel[r].fetch_add(1, std::memory_order_relaxed);
      torch::jit::drop(*stack, n);
      for (auto& t : out) stack->emplace_back(std::move(t));
      return;
    }
    counts_->fallback.fetch_add(1, std::memory_order_relaxed);
    original_.callBoxed(op, keys, stack);
  }

 private:
  std::vector<Route> routes_;
  c10::SafeKernelFunction original_;
  c10::SafeKernelFunction python_router_;
  std::shared_ptr<Counts> counts_;
};

struct QuietWarnings : c10::WarningHandler {  // "Overriding a previously registered kernel": the point
  void process(const c10::Warning&) override {}
};

c10::OperatorHandle find_op(const std::string& name, const std::string& overload) {
  auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
  TORCH_CHECK(op.has_value(), "kernforge: no operator ", name, ".", overload);
  return *op;
}

// The kernel serving `key` now: a copy of it, which stays callable after an override.
struct Snapshot {
  c10::SafeKernelFunction kernel;
};

Snapshot snapshot(const std::string& name, const std::string& overload, const std::string& key) {
  auto op = find_op(name, overload);
  return Snapshot{op.getComputedKernelForDispatchKey(c10::parseDispatchKey(key))};
}

class Registration {
 public:
  Registration(const std::string& ns, const std::string& name, const std::string& overload, const std::string& key,
               const Snapshot& original, std::vector<Route> routes)
      : counts_(std::make_shared<Counts>(routes.size())) {
    auto op = find_op(ns + "::" + name, overload);
    auto dispatch_key = c10::parseDispatchKey(key);
    auto python_router = op.getComputedKernelForDispatchKey(dispatch_key);
    QuietWarnings quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    library_ = std::make_unique<torch::Library>(torch::Library::IMPL, ns, dispatch_key, __FILE__, __LINE__);
    const std::string full = overload.empty() ? name : name + "." + overload;
    library_->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RouterKernel>(
                                     std::move(routes), original.kernel, python_router, counts_)));
  }

  void remove() { library_.reset(); }

  py::tuple counts() const {
    std::vector<int64_t> kernel;
    for (const auto& k : counts_->kernel) kernel.push_back(k.load());
    return py::make_tuple(kernel, counts_->fallback.load());
  }

 private:
  std::shared_ptr<Counts> counts_;
  std::unique_ptr<torch::Library> library_;
};

// ---------------------------------------------------------------------------- from Python

std::vector<int64_t> ints_of(const py::handle& obj) { return obj.cast<std::vector<int64_t>>(); }

Check check_of(const py::dict& d) {
  Check c;
  c.kind = d["kind"].cast<int>();
  if (c.kind == 0) {
    c.dtype = dtype_of(d["dtype"]);
    c.sizes = ints_of(d["sizes"]);
    c.strides = ints_of(d["strides"]);
    c.device_type = d["cuda"].cast<bool>() ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    c.device_indices = d["device_indices"].cast<std::vector<int>>();
    c.align = std::max<int64_t>(1, d["align"].cast<int64_t>());
  } else if (c.kind == 6) {
    c.dtype = dtype_of(d["dtype"]);
  } else if (c.kind == 2 || c.kind == 3) {
    c.int_value = d["value"].cast<int64_t>();
  } else if (c.kind == 4) {
    c.float_value = d["value"].cast<double>();
  } else if (c.kind == 5) {
    c.ints = ints_of(d["value"]);
  } else if (c.kind == 7) {
    c.text = d["value"].cast<std::string>();
  }
  return c;
}

std::shared_ptr<Entry> make_entry(const py::dict& plan) {
  const int kind = plan["kind"].cast<int>();
  c10::Device device(plan["device"].cast<std::string>());
  std::vector<Alloc> allocs;
  for (auto a : plan["allocs"]) {
    auto d = a.cast<py::dict>();
    allocs.push_back(Alloc{ints_of(d["sizes"]), ints_of(d["strides"]), dtype_of(d["dtype"])});
  }
  std::vector<Launch> launches;
  for (auto l : plan["launches"]) {
    auto d = l.cast<py::dict>();
    Launch launch{};
    launch.function = reinterpret_cast<void*>(d["function"].cast<uintptr_t>());
    auto grid = d["grid"].cast<std::vector<unsigned>>();
    for (int i = 0; i < 3; ++i) launch.grid[i] = grid.at(i);
    launch.threads = d["threads"].cast<unsigned>();
    launch.shared = d["shared"].cast<unsigned>();
    for (auto p : d["params"]) {
      auto t = p.cast<py::tuple>();
      launch.params.push_back(Param{t[0].cast<int>(), t[1].cast<int>(), t[2].cast<int64_t>(), t[3].cast<uint64_t>()});
    }
    launches.push_back(std::move(launch));
  }
  std::vector<Step> steps;
  for (auto s : plan["steps"]) {
    auto t = s.cast<py::tuple>();
    steps.push_back(Step{t[0].cast<int>(), t[1].cast<int>(), t[2].cast<double>()});
  }
  return std::make_shared<Entry>(kind, device, std::move(allocs), plan["outputs"].cast<std::vector<int>>(),
                                 std::move(launches), std::move(steps), plan["library_fn"].cast<uintptr_t>());
}

// A guard over an entry's tensors where no ATen op's router holds the call: a chain installed as
// a module's forward (fused.guarded_forward) calls it with the chain's inputs in guard order, and
// gets the outputs, or None where a tensor is not as proved (the module's own forward runs then).
struct GuardedEntry {
  std::vector<Check> checks;  // one per tensor, kind 0
  std::shared_ptr<Entry> entry;
  bool default_stream_only;  // a CUDA library's kf_forward launches on the default stream
};

py::object wrapped(std::vector<at::Tensor> out) {
  if (out.size() == 1) return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(out[0])));
  py::tuple result(out.size());
  for (size_t i = 0; i < out.size(); ++i)
    result[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(out[i])));
  return py::object(result);
}

// The entry's outputs where every value is a tensor as proved, else nothing.
std::optional<std::vector<at::Tensor>> run_guarded(const GuardedEntry& g, const std::vector<PyObject*>& values) {
  if (values.size() != g.checks.size()) return std::nullopt;
  const bool grad_wanted = at::GradMode::is_enabled();
  std::vector<at::Tensor> inputs;
  inputs.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!THPVariable_Check(values[i])) return std::nullopt;
    const at::Tensor& t = THPVariable_Unpack(values[i]);
    if (!plain_tensor_as_proved(g.checks[i], t, grad_wanted)) return std::nullopt;
    inputs.push_back(t);
  }
  if (g.default_stream_only && !inputs.empty() && inputs[0].is_cuda() && current_stream(inputs[0].device()) != nullptr)
    return std::nullopt;
  return g.entry->run(inputs);
}

py::object call_guarded(const GuardedEntry& g, const py::args& args) {
  std::vector<PyObject*> values;
  values.reserve(args.size());
  for (auto a : args) values.push_back(a.ptr());
  auto out = run_guarded(g, values);
  return out ? wrapped(std::move(*out)) : py::none();
}

// A guarded entry at a module's call (fused.module_route): its tensors gathered from the call's
// positional arguments and from the dicts that hold the module's parameters (read at every call:
// a parameter set anew is seen), its calls counted as a router's are. Gathering and counting here
// rather than in Python took ~0.3 us off a module route's call on a 2-core CPU.
struct ModuleEntry {
  struct Source {
    Py_ssize_t at;  // the argument's position, or -1: the value of `name` in `dict`
    py::object dict, name;
  };
  std::shared_ptr<GuardedEntry> guarded;
  std::vector<Source> sources;
  int64_t kernel = 0, fallback = 0;  // the GIL is held throughout

  // The kernel's first output (what the module returns), or None where a value is missing or
  // not as proved: the caller runs the module's own forward then.
  py::object call(const py::tuple& args) {
    std::vector<PyObject*> values;
    values.reserve(sources.size());
    for (const auto& s : sources) {
      PyObject* value = nullptr;
      if (s.at >= 0) {
        if (s.at < PyTuple_GET_SIZE(args.ptr())) value = PyTuple_GET_ITEM(args.ptr(), s.at);
      } else {
        value = PyDict_GetItemWithError(s.dict.ptr(), s.name.ptr());  // borrowed
        if (value == nullptr && PyErr_Occurred()) throw py::error_already_set();
      }
      if (value == nullptr) {
        ++fallback;
        return py::none();
      }
      values.push_back(value);
    }
    auto out = run_guarded(*guarded, values);
    if (!out || out->empty()) {
      ++fallback;
      return py::none();
    }
    ++kernel;
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(out->front())));
  }

  py::tuple counts() const { return py::make_tuple(std::vector<int64_t>{kernel}, fallback); }
};

// A routed module's whole call (fused.calling_class) where its route is a ModuleEntry: the checks
// that nn.Module's call would do nothing but call the forward (this instance, no keywords, the
// proved arity, its forward still the route's, no hook of its own nor a global one, no
// module.compile(), not compiling), then the entry. `skip` where a check fails (the caller runs
// nn.Module's call), else the entry's answer (its output, or None: the caller runs the module's
// own forward). The module and its route's forward are held weakly: the module's class holds this
// object, and a strong reference back would make a cycle the garbage collector cannot see through.
// With the checks in Python the routed call took 3.11-3.29 us on a 2-core CPU, in C++ 2.94-3.17,
// the entry alone 2.40 (bench/results/cpu/issue32/README.md).
struct ModuleCall {
  std::shared_ptr<ModuleEntry> entry;
  py::object module_ref, forward_ref;  // weak references
  Py_ssize_t n_args = 0;
  std::vector<py::object> own_hooks, global_hooks;  // the hook dicts' names; torch's global dicts
  py::object forward_name, compiled_name, is_compiling, skip;

  py::object call(py::handle self, const py::tuple& args, py::handle kwargs) {
    if (self.ptr() != PyWeakref_GetObject(module_ref.ptr())) return skip;
    if (PyDict_Check(kwargs.ptr()) && PyDict_Size(kwargs.ptr()) > 0) return skip;
    if (PyTuple_GET_SIZE(args.ptr()) != n_args) return skip;
    auto own = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(self.ptr(), nullptr));
    if (!own || !PyDict_Check(own.ptr())) {
      PyErr_Clear();
      return skip;
    }
    PyObject* forward = PyDict_GetItemWithError(own.ptr(), forward_name.ptr());  // borrowed
    if (forward == nullptr || forward != PyWeakref_GetObject(forward_ref.ptr())) {
      PyErr_Clear();
      return skip;
    }
    for (const auto& name : own_hooks) {
      PyObject* hooks = PyDict_GetItemWithError(own.ptr(), name.ptr());
      if (hooks == nullptr || !PyDict_Check(hooks) || PyDict_Size(hooks) > 0) {
        PyErr_Clear();
        return skip;
      }
    }
    for (const auto& hooks : global_hooks)
      if (PyDict_Size(hooks.ptr()) > 0) return skip;
    if (PyDict_Contains(own.ptr(), compiled_name.ptr()) != 0) {
      PyErr_Clear();
      return skip;
    }
    if (is_compiling().cast<bool>()) return skip;
    return entry->call(args);
  }
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "kernforge's native dispatch (kernforge/runtime/dispatch.py)";
  py::class_<Entry, std::shared_ptr<Entry>>(m, "Entry")
      .def("__call__", [](const Entry& e, py::args args) {
        std::vector<at::Tensor> inputs;
        for (auto a : args) inputs.push_back(THPVariable_Unpack(a.ptr()));
        // the GIL stays held: a launch takes microseconds, and an allocation may reach a
        // Python dispatch mode the caller has on
        return wrapped(e.run(inputs));
      });
  py::class_<GuardedEntry, std::shared_ptr<GuardedEntry>>(m, "GuardedEntry")
      .def("__call__", &call_guarded, "the entry's outputs where every tensor is as proved, else None");
  m.def("make_guarded", [](const py::list& checks, std::shared_ptr<Entry> entry, bool default_stream_only) {
    auto g = std::make_shared<GuardedEntry>();
    for (auto c : checks) g->checks.push_back(check_of(c.cast<py::dict>()));
    g->entry = std::move(entry);
    g->default_stream_only = default_stream_only;
    return g;
  }, "an entry behind a guard on its tensors (a module's forward)");
  py::class_<ModuleEntry, std::shared_ptr<ModuleEntry>>(m, "ModuleEntry")
      .def("__call__", &ModuleEntry::call, "the kernel's first output on the call's arguments, else None")
      .def("counts", &ModuleEntry::counts, "([kernel calls], fallbacks)");
  m.def("make_module_entry", [](std::shared_ptr<GuardedEntry> guarded, const py::list& sources) {
    auto e = std::make_shared<ModuleEntry>();
    e->guarded = std::move(guarded);
    for (auto item : sources) {
      auto t = item.cast<py::tuple>();
      e->sources.push_back(ModuleEntry::Source{t[0].cast<Py_ssize_t>(), py::reinterpret_borrow<py::object>(t[1]),
                                               py::reinterpret_borrow<py::object>(t[2])});
    }
    return e;
  }, "a guarded entry at a module's call: sources are (argument position, None, '') or (-1, dict, name)");
  py::class_<ModuleCall, std::shared_ptr<ModuleCall>>(m, "ModuleCall")
      .def("__call__", &ModuleCall::call, "the module call's answer: the kernel's output, None, or skip");
  m.def("make_module_call", [](std::shared_ptr<ModuleEntry> entry, py::handle module, py::handle forward,
                               Py_ssize_t n_args, const py::list& own_hooks, const py::list& global_hooks,
                               py::object is_compiling, py::object skip) {
    auto c = std::make_shared<ModuleCall>();
    c->entry = std::move(entry);
    c->module_ref = py::reinterpret_steal<py::object>(PyWeakref_NewRef(module.ptr(), nullptr));
    c->forward_ref = py::reinterpret_steal<py::object>(PyWeakref_NewRef(forward.ptr(), nullptr));
    if (!c->module_ref || !c->forward_ref) throw py::error_already_set();
    c->n_args = n_args;
    for (auto name : own_hooks) c->own_hooks.push_back(py::reinterpret_borrow<py::object>(name));
    for (auto hooks : global_hooks) c->global_hooks.push_back(py::reinterpret_borrow<py::object>(hooks));
    c->forward_name = py::str("forward");
    c->compiled_name = py::str("_compiled_call_impl");
    c->is_compiling = std::move(is_compiling);
    c->skip = std::move(skip);
    return c;
  }, "a routed module's call in C++ (fused.calling_class)");
  m.def("make_entry", &make_entry, "an installed kernel's call without Python, from its plan (dispatch.py)");
  py::class_<Snapshot>(m, "Snapshot");
  m.def("snapshot", &snapshot, "the kernel serving (op name, overload, dispatch key) now");
  py::class_<Registration>(m, "Registration")
      .def("remove", &Registration::remove)
      .def("counts", &Registration::counts, "(kernel calls per route, fallbacks)");
  m.def("register_router", [](const std::string& ns, const std::string& name, const std::string& overload,
                              const std::string& key, const Snapshot& original, const py::list& routes) {
    std::vector<Route> built;
    for (auto r : routes) {
      auto t = r.cast<py::tuple>();
      Route route;
      for (auto c : t[0]) route.checks.push_back(check_of(c.cast<py::dict>()));
      if (!t[1].is_none()) route.entry = t[1].cast<std::shared_ptr<Entry>>();
      route.default_stream_only = t.size() > 2 && t[2].cast<bool>();
      built.push_back(std::move(route));
    }
    return std::make_unique<Registration>(ns, name, overload, key, original, std::move(built));
  });
}
