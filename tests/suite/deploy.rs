//! The files in `deploy/`, checked statically (`scripts/test-deploy` builds and runs the image
//! with podman; `helm` does not run on the machines the suite runs on): the image is multi-stage, runs as a non-root user, checks
//! `/healthz` and gets SIGTERM itself; the compose file has every service it promises and the
//! files it mounts; the chart's templates only use values that exist and carry the probes,
//! budget, autoscaler, secret and migrations the README describes.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_image_is_multi_stage_non_root_checks_healthz_and_runs_skillgate_as_pid_1() {
    let dockerfile = read("deploy/Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let froms = instructions
        .iter()
        .filter(|l| l.starts_with("FROM "))
        .count();
    assert!(froms >= 2, "a build stage and a runtime stage");
    // Dependencies build from the manifest and lock file before the code is copied.
    let manifest = instructions
        .iter()
        .position(|l| l.starts_with("COPY Cargo.toml Cargo.lock"))
        .expect("the manifest is copied on its own");
    let code = instructions
        .iter()
        .position(|l| l.starts_with("COPY src"))
        .expect("the code is copied");
    assert!(manifest < code);
    // The binary's link settings (`build.rs`) come in with the manifest.
    assert!(
        instructions[manifest]
            .split_whitespace()
            .any(|w| w == "build.rs"),
        "{}: build.rs is not copied",
        instructions[manifest]
    );
    let user = instructions
        .iter()
        .rev()
        .find(|l| l.starts_with("USER "))
        .expect("a USER");
    let user = user.trim_start_matches("USER ").trim();
    assert!(user != "root" && user != "0", "runs as {user}");
    assert!(
        instructions
            .iter()
            .any(|l| l.starts_with("CMD curl") && l.contains("/healthz")),
        "HEALTHCHECK on /healthz"
    );
    assert!(dockerfile.contains("HEALTHCHECK"));
    // Exec form: no shell between the runtime and skillgate, so SIGTERM reaches it.
    let entry = instructions
        .iter()
        .find(|l| l.starts_with("ENTRYPOINT "))
        .expect("an ENTRYPOINT");
    let entry: Vec<String> = serde_json::from_str(entry.trim_start_matches("ENTRYPOINT ")).unwrap();
    assert_eq!(entry, ["skillgate"]);
    // Everything the image copies from the checkout is there (but the host-built binary of
    // `--target prebuilt`, which whoever builds that target puts in place).
    for line in instructions.iter().filter(|l| {
        l.starts_with("COPY ") && !l.contains("--from") && !l.contains("deploy/prebuilt/")
    }) {
        let parts: Vec<&str> = line.split_whitespace().skip(1).collect();
        for source in &parts[..parts.len() - 1] {
            assert!(repo(source).exists(), "{line}: {source} is missing");
        }
    }
}

#[test]
fn compose_runs_two_replicas_behind_a_proxy_on_postgres_with_traces() {
    let compose = yaml("deploy/compose.yaml");
    let services = compose["services"].as_object().expect("services");
    for name in [
        "postgres",
        "migrate",
        "skillgate-1",
        "skillgate-2",
        "proxy",
        "otel-collector",
        "jaeger",
    ] {
        assert!(services.contains_key(name), "service {name}");
    }
    for replica in ["skillgate-1", "skillgate-2"] {
        let env = &services[replica]["environment"];
        assert!(
            env["SKILLGATE_STORE"]
                .as_str()
                .unwrap()
                .starts_with("postgres://"),
            "{replica} uses the shared Postgres"
        );
        assert!(env["OTEL_EXPORTER_OTLP_ENDPOINT"].as_str().is_some());
        assert_eq!(
            services[replica]["depends_on"]["migrate"]["condition"],
            "service_completed_successfully"
        );
    }
    assert_eq!(services["migrate"]["command"][0], "migrate");
    assert!(
        compose["volumes"]["pgdata"].is_null() || compose["volumes"]["pgdata"].is_object(),
        "Postgres keeps its data in a named volume"
    );
    assert!(
        services["postgres"]["volumes"][0]
            .as_str()
            .unwrap()
            .starts_with("pgdata:")
    );
    // Every file a service mounts from the checkout exists.
    for (name, service) in services {
        for volume in service["volumes"].as_array().into_iter().flatten() {
            let source = volume.as_str().unwrap().split(':').next().unwrap();
            if source.starts_with('.') {
                assert!(
                    repo("deploy").join(source).exists(),
                    "{name} mounts {source}, which is missing"
                );
            }
        }
    }
    // The proxy sends to both replicas.
    let nginx = read("deploy/nginx.conf");
    assert!(nginx.contains("server skillgate-1:8080"));
    assert!(nginx.contains("server skillgate-2:8080"));
    let collector = yaml("deploy/otel-collector.yaml");
    assert_eq!(
        collector["service"]["pipelines"]["traces"]["receivers"][0],
        "otlp"
    );
}

/// Every `.Values.a.b` a template names, as dotted paths.
fn value_paths(template: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find(".Values.") {
        rest = &rest[at + ".Values.".len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
            .collect();
        paths.push(path.trim_end_matches('.').to_string());
    }
    paths
}

#[test]
fn the_chart_uses_only_values_it_defines_and_has_probes_budget_autoscaler_secret_and_migrations() {
    let chart = yaml("deploy/helm/skillgate/Chart.yaml");
    assert_eq!(chart["apiVersion"], "v2");
    let values = yaml("deploy/helm/skillgate/values.yaml");
    let dir = repo("deploy/helm/skillgate/templates");
    let mut all = String::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        assert_eq!(
            text.matches("{{").count(),
            text.matches("}}").count(),
            "{name}: unbalanced template delimiters"
        );
        for path in value_paths(&text) {
            let found = path
                .split('.')
                .try_fold(&values, |at, key| at.get(key))
                .is_some();
            assert!(
                found,
                "{name} uses .Values.{path}, which values.yaml does not define"
            );
        }
        all.push_str(&text);
    }
    for kind in [
        "kind: Deployment",
        "kind: Service",
        "kind: PodDisruptionBudget",
        "kind: HorizontalPodAutoscaler",
        "kind: Secret",
        "kind: ConfigMap",
    ] {
        assert!(all.contains(kind), "the chart has no {kind}");
    }
    let deployment = read("deploy/helm/skillgate/templates/deployment.yaml");
    let readiness = deployment
        .find("readinessProbe")
        .expect("a readiness probe");
    assert!(deployment[readiness..].contains("path: /readyz"));
    let liveness = deployment.find("livenessProbe").expect("a liveness probe");
    assert!(deployment[liveness..].contains("path: /healthz"));
    assert!(
        deployment.contains("args: [\"migrate\"]"),
        "migrations run before serving"
    );
    assert!(values["resources"]["requests"]["memory"].as_str().is_some());
    assert_eq!(values["podSecurityContext"]["runAsNonRoot"], true);
}

/// The documents of a YAML stream, each with its `kind`.
fn documents(text: &str) -> Vec<(String, String)> {
    text.split("\n---\n")
        .map(|doc| {
            let kind = doc
                .lines()
                .find_map(|l| l.strip_prefix("kind: "))
                .unwrap_or_default()
                .trim()
                .to_string();
            (kind, doc.to_string())
        })
        .collect()
}

#[test]
fn the_chart_rendered_by_hand_holds_every_literal_line_of_its_templates_and_the_drain() {
    let rendered = documents(&read("deploy/helm/rendered.yaml"));
    let values = yaml("deploy/helm/skillgate/values.yaml");
    let dir = repo("deploy/helm/skillgate/templates");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('_') {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let kind = text
            .lines()
            .find_map(|l| l.strip_prefix("kind: "))
            .unwrap_or_else(|| panic!("{name} has no kind"))
            .trim();
        let (_, doc) = rendered
            .iter()
            .find(|(k, _)| k == kind)
            .unwrap_or_else(|| panic!("rendered.yaml has no {kind} ({name})"));
        let lines: Vec<&str> = doc.lines().map(str::trim).collect();
        // A line without a template expression is rendered as written, but inside a `with`
        // block: the defaults leave those (node selector, tolerations, affinity) empty.
        let mut within_with = 0usize;
        let mut depth = 0usize;
        for line in text.lines().map(str::trim) {
            let opens = ["{{- if", "{{- with", "{{- range", "{{ if"]
                .iter()
                .any(|o| line.starts_with(o));
            if opens {
                depth += 1;
                if line.starts_with("{{- with") && within_with == 0 {
                    within_with = depth;
                }
            } else if line.starts_with("{{- end") {
                if within_with == depth {
                    within_with = 0;
                }
                depth = depth.saturating_sub(1);
            }
            if within_with > 0 || line.is_empty() || line.contains("{{") || line.starts_with('#') {
                continue;
            }
            assert!(
                lines.contains(&line),
                "{name}: `{line}` is not in rendered.yaml's {kind}: render the chart again"
            );
        }
    }
    // The values the rendering took.
    let deployment = &rendered.iter().find(|(k, _)| k == "Deployment").unwrap().1;
    let grace = values["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(deployment.contains(&format!("terminationGracePeriodSeconds: {grace}")));
    let drain: u64 = values["env"]["SKILLGATE_DRAIN"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("the chart drains on SIGTERM");
    let shutdown: u64 = values["env"]["SKILLGATE_SHUTDOWN_GRACE"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(
        drain + shutdown < grace,
        "Kubernetes waits {grace} s: the drain ({drain} s) and the grace ({shutdown} s) fit in it"
    );
    assert!(deployment.contains(&format!("value: \"{drain}\"")));
}
