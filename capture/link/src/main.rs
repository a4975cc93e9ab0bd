fn main() {
    std::process::exit(ccscope_link::shell::main_entry());
}
