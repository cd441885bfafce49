/* LOOM_HD: a function of a header that the CPU code and the CUDA kernels both call (host and
 * device under nvcc, static inline in C). */
#ifndef LOOM_HD_H
#define LOOM_HD_H

#ifdef __CUDACC__
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD static inline
#endif

#endif
