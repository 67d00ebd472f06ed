// A stand-in libcupti for the preload shim's test: every subscription fails
// as CUPTI fails when another subscriber holds it, and names that holder
// (FAKE_CUPTI_HOLDER, default "CUPTI for smprof") as CUPTI 13 does.
#include <cupti.h>

#include <cstdlib>
#include <cstring>

namespace {
const char* Holder() {
  const char* holder = std::getenv("FAKE_CUPTI_HOLDER");
  return holder != nullptr ? holder : "CUPTI for smprof";
}
}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                                       CUpti_SubscriberParams* params) {
  if (params != nullptr && params->oldSubscriberName != nullptr && params->oldSubscriberSize > 0) {
    std::strncpy(params->oldSubscriberName, Holder(), params->oldSubscriberSize - 1);
    params->oldSubscriberName[params->oldSubscriberSize - 1] = '\0';
  }
  return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  return cuptiSubscribe_v2(subscriber, callback, userdata, nullptr);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) { return CUPTI_SUCCESS; }

}  // extern "C"
