//! Nemotron-H (Mamba2 / attention / MoE, and the Puzzle variant) through the HTTP server on the
//! committed tiny fixtures: concurrent completions equal the same completions sent alone.

mod fixture_http;

#[test]
fn concurrent_completions_equal_solo_on_the_fixtures() {
    fixture_http::concurrent_equals_solo(
        &[
            "nemotron_h/latent_grouped/f32_hf",
            "nemotron_h/plain_moe/q4g64",
            "nemotron_h/puzzle/f32_hf",
        ],
        96,
    );
}
