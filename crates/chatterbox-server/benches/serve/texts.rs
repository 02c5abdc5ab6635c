//! The requests' texts: varied English sentences of one text chunk each, and the memory
//! phase's short inputs.

/// Sentence templates (`{p}` a person, `{c}` a place, `{t}` a thing, `{n}` a number): one
/// text chunk each, 50 to 80 characters.
pub const TEMPLATES: [&str; 16] = [
    "{p} walked to {c} early in the morning and bought {n} loaves of bread.",
    "Nobody expected the {t} to last for {n} years, but it never broke.",
    "In {c}, the trains leave every {n} minutes, even on a quiet Sunday.",
    "{p} said the {t} was far too heavy to carry up the stairs alone.",
    "We counted {n} birds on the roof before the rain began to fall.",
    "Have you ever seen a {t} as old as the one in the museum of {c}?",
    "After the storm, the road to {c} was closed for {n} days.",
    "When the lights went out, {p} lit {n} candles and kept on reading.",
    "Please remember to bring the {t} when you come back from {c}.",
    "The recipe asks for {n} eggs, a cup of milk and a pinch of salt.",
    "Why would anyone leave a {t} in the middle of the garden path?",
    "{p} wrote {n} letters that winter and posted every one of them.",
    "The bus to {c} was late again, by almost {n} minutes.",
    "If the weather holds, we will sail to {c} in {n} days.",
    "{p} found the {t} under a pile of newspapers in the attic.",
    "From the top of the hill you can see {c} and the sea beyond it.",
];
pub const PEOPLE: [&str; 8] = [
    "Anna",
    "Marco",
    "Doctor Patel",
    "Kenji",
    "Lucia",
    "Fatima",
    "Oliver",
    "the captain",
];
pub const PLACES: [&str; 8] = [
    "Lisbon",
    "the harbour",
    "Oslo",
    "the old town",
    "Nairobi",
    "the valley",
    "Kyoto",
    "the island",
];
pub const THINGS: [&str; 8] = [
    "lamp",
    "bicycle",
    "violin",
    "suitcase",
    "kettle",
    "map",
    "telescope",
    "radio",
];
/// Short inputs of the memory phase.
pub const SHORT: [&str; 8] = [
    "Hello there.",
    "Good morning!",
    "See you soon.",
    "Thank you.",
    "Is it raining?",
    "Not today.",
    "Right away.",
    "Well done!",
];

/// Sentence `i` of a deterministic sequence (fillers drawn by a 64-bit hash of `i`).
pub fn sentence(i: usize) -> String {
    let mut x = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut draw = |n: usize| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((x >> 33) % n as u64) as usize
    };
    TEMPLATES[i % TEMPLATES.len()]
        .replace("{p}", PEOPLE[draw(PEOPLE.len())])
        .replace("{c}", PLACES[draw(PLACES.len())])
        .replace("{t}", THINGS[draw(THINGS.len())])
        .replace("{n}", &(2 + draw(97)).to_string())
}
