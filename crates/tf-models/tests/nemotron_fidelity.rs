//! Every Nemotron-H fixture (f32 HF and MLX forms, MLX 4- and 6-bit, Puzzle) scored against
//! mlx-lm's float32 reference logits.

mod nemotron_support;

use nemotron_support::{fidelity, model, reference, score, tokens, FIXTURES};

#[test]
fn print_fidelity() {
    for (fx, forms) in FIXTURES {
        let toks = tokens(fx);
        for form in *forms {
            let mut m = model(fx, form, 2);
            let vocab = m.info().vocab_size;
            let ours = score(m.as_mut(), &toks, 1);
            for r in ["logits_full", "logits_serial", "logits_chunk5"] {
                let f = fidelity(&reference(fx, form, r), &ours, vocab);
                eprintln!("{fx}/{form} vs {r}: {f:?}");
            }
        }
    }
}
