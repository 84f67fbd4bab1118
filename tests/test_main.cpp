// The doctest runner shared by every test program.
//
// ctest runs each case alone, by name (doctest_discover_tests passes
// --test-case=NAME). A run whose filter matches no case fails here: doctest
// alone reports 0 cases and succeeds, so a case whose name the discovery
// mangles (CMake cuts a name at each ';', a list separator) would pass
// without running.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

bool g_run_ended = false;
unsigned g_cases_matched = 0;

// Records how many cases the run's filters let through.
struct CountMatched : doctest::IReporter {
  explicit CountMatched(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_run_ended = true;
    g_cases_matched = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("count_matched", 1, CountMatched);

bool names_a_case(int argc, char** argv) {
  for (int i = 1; i < argc; i++)
    if (std::strncmp(argv[i], "--test-case=", 12) == 0 || std::strncmp(argv[i], "-tc=", 4) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (ctx.shouldExit()) return rc;  // --list-test-cases, --help and the like
  if (names_a_case(argc, argv) && g_run_ended && g_cases_matched == 0) {
    std::fprintf(stderr,
                 "test_main: no test case matches the --test-case filter (a case named with ';' is cut there by "
                 "CMake's test discovery: rename it)\n");
    return 1;
  }
  return rc;
}
