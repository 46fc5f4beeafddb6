//! The part of Go's `text/template` that `docker inspect --format` users
//! type: text with `{{.Field.Sub}}`, `{{json .Field}}`, `{{.}}` and
//! `{{index .Field "key"}}` actions, over the JSON that `--json` prints.
//! Field names match case-insensitively (`{{.State}}` is `state`), and
//! `Id` is the box's id. Anything else is an error naming what is known,
//! never a silent empty string.

use serde_json::Value;

/// A parsed `--format`.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Field {
        path: Vec<String>,
        json: bool,
        index: Option<String>,
    },
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(unescape(&rest[..open])));
            }
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| format!("template: unclosed action in {text:?}"))?;
            parts.push(action(after[..close].trim().trim_matches('-').trim())?);
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(unescape(rest)));
        }
        Ok(Template { parts })
    }

    /// The template applied to `v`, with a newline at the end as docker
    /// prints one per object.
    pub fn render(&self, v: &Value) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Field { path, json, index } => {
                    let mut found = lookup(v, path)?;
                    if let Some(key) = index {
                        found = found
                            .get(key.as_str())
                            .or_else(|| key.parse::<usize>().ok().and_then(|i| found.get(i)))
                            .ok_or_else(|| format!("template: no entry {key:?}"))?;
                    }
                    if *json {
                        out.push_str(&found.to_string());
                    } else {
                        out.push_str(&plain(found));
                    }
                }
            }
        }
        Ok(out)
    }
}

fn unescape(t: &str) -> String {
    // docker users write `\t` and `\n` in their shells' single quotes.
    t.replace("\\t", "\t").replace("\\n", "\n")
}

fn action(a: &str) -> Result<Part, String> {
    let words: Vec<&str> = a.split_whitespace().collect();
    let field = |w: &str| -> Result<Vec<String>, String> {
        if w == "." {
            return Ok(Vec::new());
        }
        match w.strip_prefix('.') {
            Some(p) if !p.is_empty() => Ok(p.split('.').map(str::to_owned).collect()),
            _ => Err(format!(
                "template: unsupported action {{{{{a}}}}}: use {{{{.Field}}}}, {{{{json .Field}}}} or {{{{index .Field \"key\"}}}}"
            )),
        }
    };
    match words.as_slice() {
        [f] => Ok(Part::Field {
            path: field(f)?,
            json: false,
            index: None,
        }),
        ["json", f] => Ok(Part::Field {
            path: field(f)?,
            json: true,
            index: None,
        }),
        ["index", f, key] => Ok(Part::Field {
            path: field(f)?,
            json: false,
            index: Some(key.trim_matches('"').to_owned()),
        }),
        _ => Err(format!(
            "template: unsupported action {{{{{a}}}}}: use {{{{.Field}}}}, {{{{json .Field}}}} or {{{{index .Field \"key\"}}}}"
        )),
    }
}

fn lookup<'a>(v: &'a Value, path: &[String]) -> Result<&'a Value, String> {
    let mut at = v;
    for name in path {
        let Value::Object(map) = at else {
            return Err(format!("template: {name} is not a field of a {}", kind(at)));
        };
        let want = if name.eq_ignore_ascii_case("id") {
            "boxId"
        } else {
            name.as_str()
        };
        at = map
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(want))
            .map(|(_, v)| v)
            .ok_or_else(|| {
                let known: Vec<&str> = map.keys().map(String::as_str).collect();
                format!("template: no field {name} (fields: {})", known.join(", "))
            })?;
    }
    Ok(at)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// A value as `{{.X}}` prints it: strings bare, null as `<no value>` (Go's
/// word), lists and objects as JSON.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<no value>".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn boxv() -> Value {
        json!({"boxId": "B1", "name": "web", "state": "running",
               "spec": {"env": {"A": "1"}, "allowNet": ["x.org"], "cpus": null},
               "ports": [{"hostPort": 8080}]})
    }

    fn render(t: &str) -> Result<String, String> {
        Template::parse(t)?.render(&boxv())
    }

    #[test]
    fn what_docker_users_type_works() {
        assert_eq!(render("{{.State}}").unwrap(), "running");
        assert_eq!(render("{{.Name}} {{.Id}}").unwrap(), "web B1");
        assert_eq!(render("{{ .Spec.Env.A }}").unwrap(), "1");
        assert_eq!(render("{{json .Spec.AllowNet}}").unwrap(), r#"["x.org"]"#);
        assert_eq!(render("{{index .Spec.Env \"A\"}}").unwrap(), "1");
        assert!(render("{{(index .Ports 0)}}").is_err());
        assert_eq!(
            render("{{index .Ports 0}}").unwrap(),
            r#"{"hostPort":8080}"#
        );
        assert_eq!(render("{{.Spec.Cpus}}").unwrap(), "<no value>");
        assert_eq!(render("name:\\t{{.Name}}").unwrap(), "name:\tweb");
        assert_eq!(render("plain").unwrap(), "plain");
        assert!(render("{{json .}}").unwrap().starts_with('{'));
    }

    #[test]
    fn mistakes_are_errors_that_say_what_exists() {
        let e = render("{{.Status}}").unwrap_err();
        assert!(e.contains("no field Status") && e.contains("state"), "{e}");
        assert!(render("{{.Name").unwrap_err().contains("unclosed"));
        assert!(
            render("{{if .Name}}x{{end}}")
                .unwrap_err()
                .contains("unsupported")
        );
        assert!(
            render("{{.Name.First}}")
                .unwrap_err()
                .contains("not a field of a string")
        );
        assert!(
            render("{{index .Spec.Env \"B\"}}")
                .unwrap_err()
                .contains("no entry")
        );
    }
}
