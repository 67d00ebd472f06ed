// Kernel name helpers shared by the injector, the collector and smprof-run.
#pragma once

#include <string>
#include <string_view>

namespace smprof {

// Demangles an Itanium C++ ABI name ("_Z4gemmPfi" -> "gemm(float*, int)").
// Returns the input unchanged when it is not a mangled name (extern "C"
// kernels, Triton kernels) or cannot be demangled.
std::string Demangle(std::string_view mangled);

// The three forms a kernel selection pattern is matched against.
struct KernelNameForms {
  std::string full;       // "void ns::gemm<128>(float const*, int)"
  std::string qualified;  // "ns::gemm<128>" (no return type, no parameters)
  std::string base;       // "gemm" (no namespace, no template arguments)
};
KernelNameForms SplitKernelName(std::string_view demangled);

}  // namespace smprof
