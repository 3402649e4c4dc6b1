#!/usr/bin/env bash
# Checks deploy/: the Prometheus configuration and alert rules (promtool:
# syntax, then the alert unit tests in alerts_test.yml), the Grafana dashboard
# (valid JSON, consistent panels, every PromQL expression parses), and that
# alerts, dashboard and tests name only metrics the server exports
# (metric_names.txt).
#
# Exit status: 0 all passed; 1 a check failed; 77 (ctest's skip) the checks
# that need no promtool passed but promtool is not installed (Debian:
# apt-get install prometheus). PROMTOOL and PYTHON override the tools.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="${root}/tests/deploy"
config="${root}/deploy/prometheus/prometheus.yml"
alerts="${root}/deploy/prometheus/alerts.yml"
alert_tests="${here}/alerts_test.yml"
dashboard="${root}/deploy/grafana/performer-serve-dashboard.json"
names="${here}/metric_names.txt"
python="${PYTHON:-python3}"
promtool="${PROMTOOL:-promtool}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

fail() {
  echo "check_deploy: FAIL: $*" >&2
  exit 1
}

# --- Dashboard: JSON, structure, and its queries as a rules file ------------
"${python}" -m json.tool "${dashboard}" >/dev/null || fail "${dashboard} is not valid JSON"

# Grafana's variables are not PromQL: substitute values of the right kind so
# that promtool can parse each panel query as a recording rule.
"${python}" - "${dashboard}" "${work}/dashboard_rules.yml" <<'PY' || fail "dashboard structure"
import json
import sys

dashboard = json.load(open(sys.argv[1]))
errors = []
ids = set()
rules = []


def check_datasource(where, datasource):
    if datasource != {"type": "prometheus", "uid": "${datasource}"}:
        errors.append(f"{where}: datasource must be the ${{datasource}} variable, not {datasource}")


def panels(items):
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
for name in ("datasource", "job", "instance", "model"):
    if name not in variables:
        errors.append(f"templating: no ${name} variable")
if "model" in variables and "performer_model_info" not in variables["model"].get("definition", ""):
    errors.append("templating: $model must come from label_values(performer_model_info, model)")

for panel in panels(dashboard.get("panels", [])):
    where = f'panel {panel.get("id")} "{panel.get("title")}"'
    if panel.get("id") in ids:
        errors.append(f"{where}: duplicate id")
    ids.add(panel.get("id"))
    grid = panel.get("gridPos", {})
    if not all(k in grid for k in "hwxy") or grid["x"] + grid["w"] > 24:
        errors.append(f"{where}: bad gridPos {grid}")
    if panel.get("type") == "row":
        continue
    check_datasource(where, panel.get("datasource"))
    if not panel.get("targets"):
        errors.append(f"{where}: no queries")
    for target in panel.get("targets", []):
        check_datasource(f'{where} query {target.get("refId")}', target.get("datasource"))
        expr = target.get("expr", "")
        if not expr.strip():
            errors.append(f'{where} query {target.get("refId")}: empty expr')
            continue
        for variable, value in (("$__rate_interval", "1m"), ("$__interval", "1m"),
                                ("$job", ".*"), ("$instance", ".*"), ("$model", ".*")):
            expr = expr.replace(variable, value)
        if "$" in expr:
            errors.append(f"{where}: unknown variable in {expr!r}")
        rules.append((f'dashboard:panel{panel["id"]}_{target.get("refId")}', expr))

if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
with open(sys.argv[2], "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for record, expr in rules:
        out.write(f"      - record: {record}\n        expr: {json.dumps(expr)}\n")
print(f"check_deploy: dashboard: {len(ids)} panels, {len(rules)} queries")
PY

# --- Metric names ------------------------------------------------------------
declare -A known=()
while read -r name type _; do
  [[ -z "${name}" || "${name}" == \#* ]] && continue
  known["${name}"]="${type}"
done <"${names}"

unknown=0
for file in "${alerts}" "${alert_tests}" "${dashboard}"; do
  while read -r used; do
    [[ -n "${known[${used}]:-}" ]] && continue
    base="${used%_bucket}"
    base="${base%_sum}"
    base="${base%_count}"
    [[ "${base}" != "${used}" && "${known[${base}]:-}" == histogram ]] && continue
    echo "check_deploy: ${file#"${root}/"}: unknown metric ${used}" >&2
    unknown=1
  done < <(grep -ohE '\b(performer|process)_[a-zA-Z0-9_]+' "${file}" | sort -u)
done
((unknown == 0)) || fail "metric names missing from ${names#"${root}/"}"
echo "check_deploy: metric names: OK"

# --- promtool ----------------------------------------------------------------
if ! command -v "${promtool}" >/dev/null 2>&1; then
  echo "check_deploy: SKIP: promtool not found (apt-get install prometheus)" >&2
  exit 77
fi
"${promtool}" check config "${config}" || fail "promtool check config"
"${promtool}" check rules "${alerts}" || fail "promtool check rules"
"${promtool}" test rules "${alert_tests}" || fail "alert unit tests"
"${promtool}" check rules "${work}/dashboard_rules.yml" || fail "a dashboard query does not parse"
echo "check_deploy: OK"
