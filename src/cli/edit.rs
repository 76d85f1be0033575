//! `conductor edit ID`: change a task that still waits in the shared queue.

use std::path::Path;

use crate::cli::usage::CliError;
use crate::tasks::edit::not_editable_reason;
use crate::verbs::edit::EditSpec;
use crate::{Error, Task, TaskId};

use super::{args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Without --prompt or -f, the prompt opens in $EDITOR (else $VISUAL, else vi on a terminal — without one, and no $EDITOR, it is refused); save and quit \
to apply, or leave it unchanged. Each option given replaces that field: --after, --env and \
--label replace the whole list (`--after ''` clears it, and so do `--env ''` and \
`--label ''`). Only a task waiting in the shared queue can be edited; one that started, \
finished or was cancelled is refused (exit 3), and so is one waiting in a slot's inbox \
(cancel it and send it again). If a worker takes the task while the editor is open, the \
edit is refused and your text is kept in the file it names: the task runs as it was, \
once, never half edited.")]
pub struct Args {
    /// The task's id (or a unique prefix of it).
    pub id: String,
    /// What to change: each field given replaces that field.
    #[command(flatten)]
    pub edit: EditSpec,
    /// Print the edited task as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let root = client.root();
    let id = crate::ids::resolve(root, &super::args::task_id_arg(&args.id)?)?;
    let edited = if args.edit.any() {
        let mut spec = args.edit.clone();
        if let Some(f) = spec.file.take() {
            spec.prompt = Some(super::send::read_prompt(None, Some(&f))?);
        }
        crate::verbs::edit::edit(&client, &id, spec)?
    } else {
        match with_editor(&client, &id)? {
            Some(t) => t,
            None => {
                eprintln!("prompt unchanged; task {id} left as it was");
                return Ok(exit::OK);
            }
        }
    };
    if args.json {
        emit_json(&edited)?;
    } else {
        emit(&format!("edited task {id}\n"))?;
    }
    Ok(exit::OK)
}

/// Open the editor on the queued task's prompt and apply what was saved; `None` when
/// it was saved unchanged.
fn with_editor(client: &crate::Client, id: &TaskId) -> anyhow::Result<Option<Task>> {
    let root = client.root();
    let editor = pick_editor(std::io::IsTerminal::is_terminal(&std::io::stdin()))?;
    let seen = match root.pending_entry(id)? {
        Some(entry) => crate::Task::read(&entry, crate::fsio::TASK_SIZE_LIMIT)?,
        None => None,
    };
    let Some(seen) = seen else {
        return Err(Error::NotEditable {
            id: id.to_string(),
            reason: not_editable_reason(root, id)?,
        }
        .into());
    };
    let dir = root.queue_dir().join("edits");
    crate::fsio::ensure_dir(&dir)?;
    let file = dir.join(format!("{id}.{}.txt", crate::fsio::nonce()));
    crate::fsio::write_new(
        &file,
        seen.prompt.as_bytes(),
        crate::fsio::Durability::Atomic,
    )?;
    run_editor(&editor, &file)?;
    let mut text = std::fs::read_to_string(&file)
        .map_err(|e| Error::io("read the edited prompt", &file, e))?;
    // Editors end the last line; the prompt as written may not have.
    if !seen.prompt.ends_with('\n') && text.ends_with('\n') {
        text.pop();
    }
    if text.trim().is_empty() {
        anyhow::bail!(CliError::Usage(format!(
            "the prompt is empty after editing; task {id} is unchanged (the file was {})",
            file.display()
        )));
    }
    if text == seen.prompt {
        let _ = std::fs::remove_file(&file);
        return Ok(None);
    }
    match client.edit_task(id, Some(&seen), |t| t.prompt = text) {
        Ok(t) => {
            let _ = std::fs::remove_file(&file);
            Ok(Some(t))
        }
        Err(Error::NotEditable { reason, .. }) => Err(Error::NotEditable {
            id: id.to_string(),
            reason: format!(
                "{}; your edit is saved in {}",
                race_reason(root, id, &reason)?,
                file.display()
            ),
        }
        .into()),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "task {id} is unchanged; your edit is saved in {}",
            file.display()
        ))),
    }
}

/// "ID started while you edited" and the like: what happened while the editor was open.
fn race_reason(root: &crate::Root, id: &TaskId, reason: &str) -> crate::Result<String> {
    use crate::tasks::TaskState;
    let state = crate::tasks::find(root, id)?.map(|l| l.state);
    Ok(match state {
        Some(TaskState::Running | TaskState::Done | TaskState::Failed | TaskState::Timeout) => {
            format!("{id} started while you edited")
        }
        Some(TaskState::Cancelled) => format!("{id} was cancelled while you edited"),
        _ => reason.to_string(),
    })
}

/// `$EDITOR` (else `$VISUAL`, else `vi` — but only on a terminal: `vi` without one
/// hangs or garbles, so that is refused, saying what to give instead).
fn pick_editor(terminal: bool) -> anyhow::Result<String> {
    let set = ["EDITOR", "VISUAL"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty());
    match set {
        Some(editor) => Ok(editor),
        None if terminal => Ok("vi".to_string()),
        None => Err(CliError::Usage(
            "no terminal to edit the prompt in (stdin is not one) and neither $EDITOR nor \
             $VISUAL is set: give the new prompt with --prompt TEXT or -f FILE, or set EDITOR"
                .into(),
        )
        .into()),
    }
}

/// `editor file`, through the shell so that an editor given with its options (`code
/// --wait`) works; it must exit 0.
fn run_editor(editor: &str, file: &Path) -> anyhow::Result<()> {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file)
        .status()
        .map_err(|e| anyhow::anyhow!("cannot start the editor {editor:?}: {e}"))?;
    if !status.success() {
        anyhow::bail!(
            "the editor {editor:?} exited with {status}; the task is unchanged (your text is in {})",
            file.display()
        );
    }
    Ok(())
}
