//! One module per subcommand.

pub mod bench;
pub mod info;
pub mod models;
pub mod pull;
pub mod receipts;
pub mod run;
pub mod score;
pub mod serve;
