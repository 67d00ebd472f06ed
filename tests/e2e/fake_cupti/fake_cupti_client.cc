// A CUPTI client (as Kineto is under torch.profiler) linked against the
// stand-in libcupti: subscribes once and prints what CUPTI answered.
#include <cupti.h>

#include <cstdio>

namespace {
void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}
}  // namespace

int main() {
  CUpti_SubscriberHandle subscriber = nullptr;
  const CUptiResult r = cuptiSubscribe(&subscriber, OnCallback, nullptr);
  std::printf("cuptiSubscribe: %d\n", static_cast<int>(r));
  return r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? 0 : 1;
}
