// vkgate.devices() and vkgate.Context.
#include "common.hpp"
#include "vkgate/context.hpp"

namespace vkgate::py_bind {

namespace {

py::dict device_dict(const DeviceInfo& d) {
  py::dict r;
  r["index"] = d.index;
  r["name"] = d.name;
  r["type"] = d.type;
  r["vendor_id"] = d.vendor_id;
  r["device_id"] = d.device_id;
  r["driver"] = d.driver;
  r["api_version"] = d.api_version;
  r["summary"] = d.summary();
  py::dict caps;
  caps["fp16_arithmetic"] = d.fp16_arithmetic;
  caps["storage16"] = d.storage16;
  caps["storage_buffer_arrays"] = d.storage_buffer_arrays;
  caps["max_stage_storage_buffers"] = d.max_stage_storage_buffers;
  caps["subgroup_size"] = d.subgroup_size;
  caps["min_subgroup_size"] = d.min_subgroup_size;
  caps["max_subgroup_size"] = d.max_subgroup_size;
  caps["subgroup_size_control"] = d.subgroup_size_control;
  caps["max_workgroup_subgroups"] = d.max_workgroup_subgroups;
  caps["subgroup_arithmetic"] = d.subgroup_arithmetic;
  caps["subgroup_shuffle"] = d.subgroup_shuffle;
  caps["shared_memory_bytes"] = d.shared_memory_bytes;
  caps["max_workgroup_invocations"] = d.max_workgroup_invocations;
  caps["max_workgroup_size"] = d.max_workgroup_size;
  caps["max_workgroup_count"] = d.max_workgroup_count;
  caps["max_storage_buffer_range"] = d.max_storage_buffer_range;
  caps["max_memory_allocation_size"] = d.max_memory_allocation_size;
  caps["device_local_bytes"] = d.device_local_bytes;
  caps["coopmat_nv"] = d.coopmat_nv;
  caps["coopmat_khr"] = d.coopmat_khr;
  caps["coopmat_f16"] = d.coopmat_f16;
  caps["coopmat_f16_khr"] = d.coopmat_f16_khr;
  caps["timestamps"] = d.timestamps;
  r["capabilities"] = caps;
  return r;
}

}  // namespace

void bind_context(py::module_& m) {
  m.def(
      "devices",
      [] {
        std::vector<DeviceInfo> list;
        {
          py::gil_scoped_release nogil;
          list = Context::list_devices();
        }
        py::list r;
        for (const DeviceInfo& d : list) r.append(device_dict(d));
        return r;
      },
      "Every Vulkan device the loader exposes: a list of dicts with index, name, type\n"
      "('discrete', 'integrated', 'virtual', 'cpu', 'other'), driver, api_version, summary\n"
      "(the line `vkgate devices` prints) and capabilities (a dict).");

  py::class_<Context>(m, "Context",
                      "The Vulkan instance and the chosen device, shared by the blocks and models made on it.\n"
                      "Every object made on a Context keeps it alive.")
      .def(py::init([](arg::Device device, arg::Bool validation, arg::Int device_memory_limit,
                       arg::OptionalBool timestamps) {
             ContextOptions o;
             o.device = device_arg(device);
             o.validation = bool_arg(validation, "validation");
             o.device_memory_limit = uint64_arg(device_memory_limit, "device_memory_limit");
             if (!timestamps.is_none()) o.timestamps = bool_arg(timestamps, "timestamps");
             py::gil_scoped_release nogil;
             return std::make_unique<Context>(o);
           }),
           py::arg("device") = py::none(), py::arg("validation") = false, py::arg("device_memory_limit") = 0,
           py::arg("timestamps") = py::none(),
           "Context(device=None, validation=False, device_memory_limit=0, timestamps=None)\n\n"
           "device: an index (1 or '1') or a case-insensitive name substring ('llvmpipe');\n"
           "  None: the VKGATE_DEVICE environment variable, else the best device.\n"
           "  A selector that matches nothing raises vkgate.Error (code 'no_device').\n"
           "validation: enable VK_LAYER_KHRONOS_validation with synchronization validation\n"
           "  (also VKGATE_VALIDATION=1); its messages are counted (validation_messages).\n"
           "device_memory_limit: most device memory in bytes this Context may take (0: no limit).\n"
           "timestamps: a GPU timestamp around every dispatch, which last_timings() reads (they slow\n"
           "  decode steps: 9 % on an H200); None: the VKGATE_TIMESTAMPS environment variable, else off.")
      .def_property_readonly("device", [](const Context& c) { return device_dict(c.device()); },
                             "The chosen device (a dict as devices() gives).")
      .def_property_readonly("validation_enabled", &Context::validation_enabled)
      .def_property_readonly("device_lost", &Context::device_lost,
                             "True once the device was lost: nothing more can run on this Context.")
      .def_property_readonly("device_memory_allocated", &Context::device_memory_allocated,
                             "Device memory this Context holds, bytes.")
      .def_property_readonly("device_memory_in_use", &Context::device_memory_in_use,
                             "The part of it handed out to live tensors and staging buffers, bytes.")
      .def_property_readonly("validation_messages", &Context::validation_messages,
                             "How many warnings and errors the validation layer reported so far.")
      .def("take_validation_messages", &Context::take_validation_messages,
           "The validation layer's messages since the last call (a list of str), then forgets them.")
      .def("__repr__", [](const Context& c) { return "<vkgate.Context on " + c.device().name + ">"; });
}

}  // namespace vkgate::py_bind
