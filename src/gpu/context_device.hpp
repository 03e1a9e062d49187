// Internal: what the Context learns about a physical device (its
// capabilities as a DeviceInfo, its compute queue, its extensions), kept
// apart from instance and device creation (context.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/vk.hpp"
#include "vkgate/context.hpp"

namespace vkgate::gpu::device {

// The instance asks for Vulkan 1.3 (SPIR-V with cooperative-matrix types needs
// it); a device then offers min(this, its own version).
constexpr uint32_t kInstanceApi = VK_API_VERSION_1_3;
inline uint32_t usable_api(uint32_t device_api) { return std::min(device_api, kInstanceApi); }

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name);


// VK_KHR_cooperative_matrix, as in the Vulkan registry: the headers of
// Debian 12 (1.3.239) predate it, so vkgate declares what it queries itself.
constexpr auto kCoopmatFeaturesKhr = VkStructureType(1000506000);
constexpr auto kCoopmatPropertiesKhr = VkStructureType(1000506001);
constexpr const char* kCoopmatKhrExtension = "VK_KHR_cooperative_matrix";
struct CoopmatFeaturesKhr {
  VkStructureType sType = kCoopmatFeaturesKhr;
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE, cooperativeMatrixRobustBufferAccess = VK_FALSE;
};
std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd);
// The compute queue family to use (a compute-only one if there is one), or −1.
int compute_queue_family(VkPhysicalDevice pd);
// Device types by preference: discrete > integrated > virtual > CPU.
int type_rank(VkPhysicalDeviceType t);
// The device's capabilities as vkgate uses them.
DeviceInfo describe(VkInstance instance, VkPhysicalDevice pd, int index);

}  // namespace vkgate::gpu::device
