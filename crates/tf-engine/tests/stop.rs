//! Stop strings hold back possible prefixes and cut at the first stop.

use tf_engine::stop::{StopFeed, StopStrings};

#[test]
fn holds_back_a_partial_stop_and_cuts_at_the_stop() {
    let mut s = StopStrings::new(["</end>".to_string()]);
    assert_eq!(
        s.feed("Hello </"),
        StopFeed {
            emit: "Hello ".into(),
            stopped: false
        }
    );
    assert_eq!(
        s.feed("en"),
        StopFeed {
            emit: "".into(),
            stopped: false
        }
    );
    assert_eq!(
        s.feed("d> tail"),
        StopFeed {
            emit: "".into(),
            stopped: true
        }
    );
}

#[test]
fn releases_held_text_that_turned_out_not_to_stop() {
    let mut s = StopStrings::new(["ab".to_string(), "".to_string()]);
    assert_eq!(s.feed("xa").emit, "x");
    assert_eq!(s.feed("c").emit, "ac");
    assert_eq!(s.feed("é a").emit, "é ");
    assert_eq!(s.finish(), "a");
}

#[test]
fn earliest_of_several_stops_wins() {
    let mut s = StopStrings::new(["world".to_string(), "lo w".to_string()]);
    let f = s.feed("hello world");
    assert_eq!(
        f,
        StopFeed {
            emit: "hel".into(),
            stopped: true
        }
    );
}
