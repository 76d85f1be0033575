//! `conductor-launch`: an orchestrator pane and N worker panes in tmux (same as
//! `conductor launch`).

fn main() {
    std::process::exit(conductor::programs::conductor_launch());
}
