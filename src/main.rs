use std::process::ExitCode;

fn main() -> ExitCode {
    polaris::cli::main()
}
