// Tiled GEMM core: acc[TM][TN] = Σ_k A(m, k)·B(n, k), k in [k_begin, k_end),
// for the workgroup's BM×BN tile (k_end − k_begin a multiple of BK, or k_end
// the matrix's K). The including shader defines load_a(m, k) and load_b(n, k)
// (returning 0 outside the matrix) and the spec constants BM, BN, BK, TM, TN.
// Tiles go through shared memory, stored k-major so the inner loop reads
// contiguous rows; each thread then keeps a TM×TN register tile.

shared float tile_a[BK * BM];
shared float tile_b[BK * BN];
float acc[TM][TN];

void gemm_tile(uint m0, uint n0, uint k_begin, uint k_end) {
  const uint tid = gl_LocalInvocationID.x;
  const uint tn = tid % (BN / TN);
  const uint tm = tid / (BN / TN);
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;

  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    for (uint e = tid; e < BM * BK; e += WG) {
      uint r = e / BK, c = e - r * BK;
      tile_a[c * BM + r] = load_a(m0 + r, k0 + c);
    }
    for (uint e = tid; e < BN * BK; e += WG) {
      uint r = e / BK, c = e - r * BK;
      tile_b[c * BN + r] = load_b(n0 + r, k0 + c);
    }
    barrier();
    [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
      float a[TM];
      float b[TN];
      [[unroll]] for (uint i = 0; i < TM; ++i) a[i] = tile_a[kk * BM + tm * TM + i];
      [[unroll]] for (uint j = 0; j < TN; ++j) b[j] = tile_b[kk * BN + tn * TN + j];
      [[unroll]] for (uint i = 0; i < TM; ++i)
        [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier();
  }
}

// Row and column of register (i, j) of this thread in the output tile.
uint tile_row(uint m0, uint i) { return m0 + (gl_LocalInvocationID.x / (BN / TN)) * TM + i; }
uint tile_col(uint n0, uint j) { return n0 + (gl_LocalInvocationID.x % (BN / TN)) * TN + j; }
