//! The text of the fault-injection rules (`RSW_FAULTS`, `RSW_FAULTS_FILE`),
//! which rsw (its rules) and librdmacm (the `cm:` rules) each read: one
//! place for where the text comes from and how it splits into rules.

/// The spec from the environment: `RSW_FAULTS_FILE`'s rules, then
/// `RSW_FAULTS`'s (empty when neither is set).
pub fn from_env() -> Result<String, String> {
    let mut spec = String::new();
    if let Some(path) = std::env::var_os("RSW_FAULTS_FILE") {
        spec = std::fs::read_to_string(&path)
            .map_err(|e| format!("RSW_FAULTS_FILE={}: {e}", path.to_string_lossy()))?;
        spec.push('\n');
    }
    if let Ok(s) = std::env::var("RSW_FAULTS") {
        spec.push_str(&s);
    }
    Ok(spec)
}

/// The rules of a spec: one or more a line, `;`-separated, `#` to the end
/// of the line a comment, blanks trimmed, empty ones skipped.
pub fn rules(spec: &str) -> impl Iterator<Item = &str> {
    spec.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(';'))
        .map(str::trim)
        .filter(|r| !r.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn rules_split() {
        let r: Vec<&str> = super::rules("seed=1; qp=*:rnr # c\n\n cm:addr=error;;").collect();
        assert_eq!(r, ["seed=1", "qp=*:rnr", "cm:addr=error"]);
    }
}
