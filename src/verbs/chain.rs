//! Chains: a step's prompt carries the output of the step before it (`conductor run --chain`, the MCP `submit` with `continueFrom`).

use crate::TaskResult;

/// The chain's step prompt: its own, then the previous step's output (README, `run --chain`).
pub fn chained_prompt(prompt: &str, previous: Option<&TaskResult>) -> String {
    let Some(prev) = previous else {
        return prompt.to_string();
    };
    let mut p = format!("{prompt}\n\nOutput of the previous step:\n{}", prev.output);
    if let (true, Some(file)) = (prev.output_truncated, &prev.output_file) {
        p.push_str(&format!(
            "\n(the output above was cut; all of it is in {file})"
        ));
    }
    p
}
