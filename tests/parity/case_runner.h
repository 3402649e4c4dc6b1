// Dispatch of golden-fixture cases to the runner for their `kind`. Each
// runner file registers itself for one or more kinds with
// PERFORMER_REGISTER_CASE_RUNNER; a case whose kind has no runner fails.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "tests/testing/fixtures.h"

namespace performer::testing {

using CaseRunner = std::function<void(const FixtureCase&)>;

// (family, kind) -> runner.
std::map<std::string, CaseRunner>& CaseRunners();

inline bool RegisterCaseRunner(const std::string& family, const std::string& kind,
                               CaseRunner runner) {
  CaseRunners()[family + "/" + kind] = std::move(runner);
  return true;
}

}  // namespace performer::testing

#define PERFORMER_CASE_RUNNER_CONCAT_(a, b) a##b
#define PERFORMER_CASE_RUNNER_CONCAT(a, b) PERFORMER_CASE_RUNNER_CONCAT_(a, b)
#define PERFORMER_REGISTER_CASE_RUNNER(family, kind, fn)                             \
  static const bool PERFORMER_CASE_RUNNER_CONCAT(performer_case_runner_, __LINE__) = \
      ::performer::testing::RegisterCaseRunner(family, kind, fn)
