//! Muse Spark through the HTTP server on the committed tiny fixtures: several concurrent
//! completions equal the same completions sent alone, token for token.

mod fixture_http;

#[test]
fn concurrent_completions_equal_solo_on_the_fixtures() {
    fixture_http::concurrent_equals_solo(&["muse_spark/mlx-f32", "muse_spark/mlx-4bit"], 256);
}
