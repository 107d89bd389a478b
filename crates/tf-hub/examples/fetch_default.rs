//! Prints the default model's path, fetching it on first use, or the named error:
//! `cargo run -p tf-hub --example fetch_default`.

fn main() {
    match tf_hub::ensure_default_model(true) {
        Ok(path) => println!("{}", path.display()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
