//! Narrowing a worker's command line for one task: the tools and the permission or
//! approval mode it may have, never more than the worker's.

/// The approval modes Gemini CLI knows (`--approval-mode`); the worker's
/// `--permission-mode` picks one for the gemini preset (default: `yolo`).
pub const GEMINI_APPROVAL_MODES: [&str; 4] = ["default", "auto_edit", "yolo", "plan"];

/// How much a Claude Code permission mode lets run unattended (higher: more).
pub fn claude_mode_rank(mode: &str) -> Option<u8> {
    match mode {
        "plan" => Some(0),
        "default" | "manual" | "dontAsk" => Some(1),
        "acceptEdits" => Some(2),
        "auto" => Some(3),
        "bypassPermissions" => Some(4),
        _ => None,
    }
}

/// How much a Gemini CLI approval mode lets run unattended (higher: more).
pub fn gemini_mode_rank(mode: &str) -> Option<u8> {
    GEMINI_APPROVAL_MODES
        .iter()
        .position(|m| *m == mode)
        .map(|i| [1, 2, 3, 0][i])
}

/// Where option `names` is in `args`: (its index, its values). `variadic`: values run
/// to the next option, as Claude Code reads `--allowedTools a b`; `--opt=value` too.
pub(super) fn option_at(
    args: &[String],
    names: &[&str],
    variadic: bool,
) -> Option<(usize, Vec<String>)> {
    args.iter().enumerate().find_map(|(i, a)| {
        if let Some((name, value)) = a.split_once('=') {
            return names.contains(&name).then(|| (i, vec![value.to_string()]));
        }
        if !names.contains(&a.as_str()) {
            return None;
        }
        let rest = args[i + 1..].iter().take_while(|v| !v.starts_with('-'));
        let values = if variadic {
            rest.cloned().collect()
        } else {
            rest.take(1).cloned().collect()
        };
        Some((i, values))
    })
}

/// `args` without option `names` and its values.
pub(super) fn without_option(args: &[String], names: &[&str], variadic: bool) -> Vec<String> {
    let mut out = args.to_vec();
    while let Some((i, values)) = option_at(&out, names, variadic) {
        let n = if out[i].contains('=') {
            1
        } else {
            1 + values.len()
        };
        out.drain(i..i + n);
    }
    out
}

/// Claude Code's tool list split as it reads it: on commas and spaces outside a rule's
/// parentheses (`Bash(git *),Read`).
pub(super) fn split_tools(values: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for v in values {
        let (mut cur, mut depth) = (String::new(), 0u32);
        for c in v.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' | ' ' if depth == 0 => {
                    if !cur.trim().is_empty() {
                        out.push(cur.trim().to_string());
                    }
                    cur.clear();
                    continue;
                }
                _ => {}
            }
            cur.push(c);
        }
        if !cur.trim().is_empty() {
            out.push(cur.trim().to_string());
        }
    }
    out
}

/// A tool list as given on a command line (`Read,Bash(git *)`), one tool or rule each.
pub fn tool_list(list: &str) -> Vec<String> {
    split_tools(&[list.to_string()])
}

/// A tool rule's tool: `Bash` of `Bash(git *)`.
pub(super) fn tool_name(rule: &str) -> &str {
    rule.split('(').next().unwrap_or(rule).trim()
}

pub(super) fn narrow_claude(
    args: &[String],
    tools: Option<&[String]>,
    mode: Option<&str>,
) -> std::result::Result<Vec<String>, String> {
    const ALLOWED: [&str; 2] = ["--allowedTools", "--allowed-tools"];
    const DENIED: [&str; 2] = ["--disallowedTools", "--disallowed-tools"];
    const MODE: [&str; 1] = ["--permission-mode"];
    let mut out = args.to_vec();
    if let Some(tools) = tools {
        let worker = split_tools(&option_at(args, &ALLOWED, true).map_or(vec![], |(_, v)| v));
        for t in tools {
            if !worker.iter().any(|w| w == t || w.as_str() == tool_name(t)) {
                return Err(format!(
                    "allowedTools: {t} is not among the tools this worker lets its agent use \
                     unattended ({}): a task can narrow them, not widen them",
                    if worker.is_empty() {
                        "none".to_string()
                    } else {
                        worker.join(",")
                    }
                ));
            }
        }
        let mut denied = split_tools(&option_at(args, &DENIED, true).map_or(vec![], |(_, v)| v));
        for w in &worker {
            if !tools.iter().any(|t| tool_name(t) == tool_name(w)) && !denied.contains(w) {
                denied.push(w.clone());
            }
        }
        out = without_option(&out, &ALLOWED, true);
        out = without_option(&out, &DENIED, true);
        if !tools.is_empty() {
            out.extend(["--allowedTools".to_string(), tools.join(",")]);
        }
        if !denied.is_empty() {
            out.extend(["--disallowedTools".to_string(), denied.join(",")]);
        }
    }
    if let Some(mode) = mode {
        let worker = option_at(args, &MODE, false)
            .and_then(|(_, v)| v.into_iter().next())
            .unwrap_or_else(|| "default".into());
        let Some(rank) = claude_mode_rank(mode) else {
            return Err(format!(
                "permissionMode: {mode:?} is not a Claude Code permission mode (plan, \
                 default, manual, dontAsk, acceptEdits, auto, bypassPermissions)"
            ));
        };
        match claude_mode_rank(&worker) {
            Some(w) if rank <= w => {}
            _ => {
                return Err(format!(
                    "permissionMode: {mode} lets the agent do more than this worker's \
                     {worker}: a task can narrow the worker's mode, not widen it"
                ))
            }
        }
        out = without_option(&out, &MODE, false);
        out.extend(["--permission-mode".to_string(), mode.to_string()]);
    }
    Ok(out)
}

pub(super) fn narrow_gemini(
    args: &[String],
    mode: &str,
) -> std::result::Result<Vec<String>, String> {
    const MODE: [&str; 1] = ["--approval-mode"];
    let yolo = args.iter().any(|a| a == "--yolo" || a == "-y");
    let worker = match option_at(args, &MODE, false).and_then(|(_, v)| v.into_iter().next()) {
        Some(m) => m,
        None if yolo => "yolo".into(),
        None => "default".into(),
    };
    let Some(rank) = gemini_mode_rank(mode) else {
        return Err(format!(
            "permissionMode: {mode:?} is not a gemini approval mode (one of {})",
            GEMINI_APPROVAL_MODES.join(", ")
        ));
    };
    match gemini_mode_rank(&worker) {
        Some(w) if rank <= w => {}
        _ => {
            return Err(format!(
                "permissionMode: {mode} lets the agent do more than this worker's {worker}: \
                 a task can narrow the worker's approval mode, not widen it"
            ))
        }
    }
    let mut out: Vec<String> = without_option(args, &MODE, false)
        .into_iter()
        .filter(|a| a != "--yolo" && a != "-y")
        .collect();
    out.extend(["--approval-mode".to_string(), mode.to_string()]);
    Ok(out)
}
