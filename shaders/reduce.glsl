// Sum and max over a workgroup, for shaders that give each row to one
// workgroup. Call from uniform control flow.
// With ONE_SUBGROUP the host makes the workgroup exactly one subgroup (CPU
// drivers, whose subgroup size is fixed) and one subgroup operation is the
// whole reduction: no shared memory and no barrier, both costly on llvmpipe,
// which runs a workgroup on one thread and each barrier as a coroutine switch.
#ifdef ONE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
float wg_sum(float v) { return subgroupAdd(v); }
float wg_max(float v) { return subgroupMax(v); }
#else
shared float wg_red[WG];
// WG is a power of two (the host picks it so).
float wg_reduce(float v, bool take_max) {
  const uint tid = gl_LocalInvocationID.x;
  wg_red[tid] = v;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) wg_red[tid] = take_max ? max(wg_red[tid], wg_red[tid + s]) : wg_red[tid] + wg_red[tid + s];
    barrier();
  }
  const float r = wg_red[0];
  barrier();  // the next reduction overwrites wg_red
  return r;
}
float wg_sum(float v) { return wg_reduce(v, false); }
float wg_max(float v) { return wg_reduce(v, true); }
#endif
