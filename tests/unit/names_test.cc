// Demangle and SplitKernelName on names taken from g++ and nvcc object files.
#include "common/names.h"

#include <gtest/gtest.h>

namespace smprof {
namespace {

TEST(DemangleTest, ItaniumNames) {
  EXPECT_EQ(Demangle("_Z4gemmPfi"), "gemm(float*, int)");
  EXPECT_EQ(Demangle("_ZN2ns4gemmILi128EEEvPKfi"), "void ns::gemm<128>(float const*, int)");
  EXPECT_EQ(Demangle("_ZN2nsL4gemmILi128EEEvPKfi"), "void ns::gemm<128>(float const*, int)");
  EXPECT_EQ(Demangle("_Z13vecadd_kernelPf"), "vecadd_kernel(float*)");
  EXPECT_EQ(Demangle("_ZN12_GLOBAL__N_14anonIiEEvT_"), "void (anonymous namespace)::anon<int>(int)");
  EXPECT_EQ(Demangle("_ZN36_GLOBAL__N__da25dcdf_4_b_cu_3e24bd0b6hiddenEPi"), "(anonymous namespace)::hidden(int*)");
  EXPECT_EQ(Demangle("_Z6kernelIZ3usevEUliE_EvT_"), "void kernel<use()::{lambda(int)#1}>(use()::{lambda(int)#1})");
  EXPECT_EQ(Demangle("_Z5applyI17__nv_dl_wrapper_tI11__nv_dl_tagIPFivEXadL_Z4mainEELj1EEJEEEvT_"),
            "void apply<__nv_dl_wrapper_t<__nv_dl_tag<int (*)(), &main, 1u>> >"
            "(__nv_dl_wrapper_t<__nv_dl_tag<int (*)(), &main, 1u>>)");
}

TEST(DemangleTest, NonMangledNamesAreReturnedAsIs) {
  EXPECT_EQ(Demangle("vecadd_kernel"), "vecadd_kernel");
  EXPECT_EQ(Demangle("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
  EXPECT_EQ(Demangle("_attn_fwd"), "_attn_fwd");
  // Would demangle as the type "int" if passed to __cxa_demangle blindly.
  EXPECT_EQ(Demangle("i"), "i");
  EXPECT_EQ(Demangle("f"), "f");
  EXPECT_EQ(Demangle(""), "");
  EXPECT_EQ(Demangle("_Z"), "_Z");
  EXPECT_EQ(Demangle("_Zbogus!"), "_Zbogus!");
}

TEST(DemangleTest, ViewNeedNotBeNulTerminated) {
  const std::string buffer = "_Z4gemmPfiTRAILING";
  EXPECT_EQ(Demangle(std::string_view(buffer).substr(0, 10)), "gemm(float*, int)");
}

struct SplitCase {
  const char* demangled;
  const char* qualified;
  const char* base;
};

class SplitKernelNameTest : public testing::TestWithParam<SplitCase> {};

TEST_P(SplitKernelNameTest, ThreeForms) {
  const SplitCase& c = GetParam();
  const KernelNameForms forms = SplitKernelName(c.demangled);
  EXPECT_EQ(forms.full, c.demangled);
  EXPECT_EQ(forms.qualified, c.qualified);
  EXPECT_EQ(forms.base, c.base);
}

INSTANTIATE_TEST_SUITE_P(
    Names, SplitKernelNameTest,
    testing::Values(
        SplitCase{"void ns::gemm<128>(float const*, int)", "ns::gemm<128>", "gemm"},
        SplitCase{"gemm(float*, int)", "gemm", "gemm"}, SplitCase{"vecadd_kernel", "vecadd_kernel", "vecadd_kernel"},
        SplitCase{"triton_poi_fused_add_0", "triton_poi_fused_add_0", "triton_poi_fused_add_0"}, SplitCase{"", "", ""},
        // Spaces inside template arguments are not a return type boundary.
        SplitCase{"unsigned int uk<ns::Foo<unsigned int> >(ns::Foo<unsigned int>)", "uk<ns::Foo<unsigned int> >", "uk"},
        SplitCase{"std::pair<int, unsigned int> ns::pr<int>(int)", "ns::pr<int>", "pr"},
        SplitCase{"void ns::Foo<unsigned int>::bar<3>(unsigned int)", "ns::Foo<unsigned int>::bar<3>", "bar"},
        SplitCase{"ns::Foo<int>::qq(int)", "ns::Foo<int>::qq", "qq"},
        SplitCase{"std::pair<int, unsigned int>::pair<int, unsigned int, true>()",
                  "std::pair<int, unsigned int>::pair<int, unsigned int, true>", "pair"},
        // Anonymous namespaces contain a '(' and a space.
        SplitCase{"void (anonymous namespace)::anon<int>(int)", "(anonymous namespace)::anon<int>", "anon"},
        SplitCase{"(anonymous namespace)::hidden(int*)", "(anonymous namespace)::hidden", "hidden"},
        // Lambdas: local entities carry their enclosing function's parameters.
        SplitCase{"void kernel<use()::{lambda(int)#1}>(use()::{lambda(int)#1})", "kernel<use()::{lambda(int)#1}>",
                  "kernel"},
        SplitCase{"use()::{lambda(int)#1}::operator()(int) const", "use()::{lambda(int)#1}::operator()", "operator()"},
        SplitCase{"void apply<__nv_dl_wrapper_t<__nv_dl_tag<int (*)(), &main, 1u>> >"
                  "(__nv_dl_wrapper_t<__nv_dl_tag<int (*)(), &main, 1u>>)",
                  "apply<__nv_dl_wrapper_t<__nv_dl_tag<int (*)(), &main, 1u>> >", "apply"},
        // Operators.
        SplitCase{"bool ns::S::operator()<double>(double) const", "ns::S::operator()<double>", "operator()"},
        SplitCase{"ns::S::operator<(ns::S const&) const", "ns::S::operator<", "operator<"},
        SplitCase{"bool ns::operator< <ns::S>(ns::S const&, int)", "ns::operator< <ns::S>", "operator<"},
        SplitCase{"ns::S::operator>>(int)", "ns::S::operator>>", "operator>>"},
        SplitCase{"Conv::operator int() const", "Conv::operator int", "operator int"},
        SplitCase{"operator new[](unsigned long)", "operator new[]", "operator new[]"},
        // Clone suffixes follow the parameter list.
        SplitCase{"ns::step(int) [clone .cold]", "ns::step", "step"},
        // Expression arguments put '>' inside parentheses (g++: _Z3selILi3EEv1EIXgtT_Li2EEE).
        SplitCase{"void sel<3>(E<((3)>(2))>)", "sel<3>", "sel"},
        SplitCase{"void ns::pick<E<((3)>(2))> >(int)", "ns::pick<E<((3)>(2))> >", "pick"},
        // The collector names launches with `qualified` (it had a parser of
        // its own that showed this lambda kernel as "f").
        SplitCase{"f(int)::{lambda(int)#1}::operator()(int) const", "f(int)::{lambda(int)#1}::operator()",
                  "operator()"},
        SplitCase{"my_kernel(int)", "my_kernel", "my_kernel"},
        SplitCase{"void cub::Reduce<cub::Policy<(bool)1>, thrust::plus<int> >(int*, int)",
                  "cub::Reduce<cub::Policy<(bool)1>, thrust::plus<int> >", "Reduce"},
        SplitCase{"void k<void (*)(int), &f>(int)", "k<void (*)(int), &f>", "k"},
        SplitCase{"void foo<(3>2)>(int)", "foo<(3>2)>", "foo"},
        SplitCase{"unsigned int* ns::get<unsigned int>(unsigned int)", "ns::get<unsigned int>", "get"},
        SplitCase{"ns::Functor<int>::operator()(int) const", "ns::Functor<int>::operator()", "operator()"}));

TEST(SplitKernelNameTest, DemangledThenSplit) {
  const KernelNameForms forms = SplitKernelName(Demangle("_ZN2ns3FooIjE3barILi3EEEvj"));
  EXPECT_EQ(forms.full, "void ns::Foo<unsigned int>::bar<3>(unsigned int)");
  EXPECT_EQ(forms.qualified, "ns::Foo<unsigned int>::bar<3>");
  EXPECT_EQ(forms.base, "bar");
}

TEST(SplitKernelNameTest, UnbalancedInputDoesNotCrash) {
  for (const char* s :
       {"a<b", "a>b", "f(", ")(", "ns::<", "::", "operator", "(anonymous namespace", "<<>>(", "void f<int(int)"}) {
    const KernelNameForms forms = SplitKernelName(s);
    EXPECT_EQ(forms.full, s);
    EXPECT_LE(forms.qualified.size(), forms.full.size()) << s;
    EXPECT_LE(forms.base.size(), forms.qualified.size()) << s;
  }
}

}  // namespace
}  // namespace smprof
