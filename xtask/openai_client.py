"""The official `openai` Python client against `chatterbox serve` (run by `cargo xtask
openai-client`, which starts the server on a tiny test checkpoint and passes its URL and key).

Checks: whole files (wav, flac, pcm) decode and have a plausible length; a request without
`response_format` gets MP3 (OpenAI's default: MPEG frame headers walked); `with_streaming_response`
delivers a chunked WAV stream, raw PCM and Ogg Opus (pages walked, exact end granule); SSE events carry base64 audio and end with
`speech.audio.done`; a voice uploaded to the library is used by name and deleted; the client
raises the right exceptions (unknown voice or model: NotFoundError; a format the server does not
encode (aac), a speed outside 0.25..4: BadRequestError; a wrong key: AuthenticationError);
`models.list()`; `speed` (OpenAI's own parameter) gives round(n / speed) samples of the n at
speed 1; SSE with `"timestamps": true` (in extra_body) carries `speech.audio.timestamps` events
whose sentence times end with the audio, divided by the speed at another speed.
"""

import argparse
import base64
import inspect
import io
import json
import math
import struct
import sys
import time
import urllib.error
import urllib.request
import uuid
import wave

import openai
from openai import OpenAI

SAMPLE_RATE = 24_000
# --max-new-tokens 30 on the server: at most 1.2 s of speech tokens, plus the flow's tail
MAX_SECONDS = 5.0

failures = []


def check(name, fn):
    t0 = time.monotonic()
    try:
        detail = fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported, then the run fails
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        return
    extra = f" ({detail})" if detail else ""
    print(f"ok   {name}{extra} [{time.monotonic() - t0:.2f} s]", flush=True)


def expect(cond, message):
    if not cond:
        raise AssertionError(message)


def wav_samples(data):
    """A whole WAV file: its 16-bit mono 24 kHz sample count (via the stdlib `wave`)."""
    with wave.open(io.BytesIO(data)) as w:
        expect(w.getnchannels() == 1, f"{w.getnchannels()} channels")
        expect(w.getframerate() == SAMPLE_RATE, f"{w.getframerate()} Hz")
        expect(w.getsampwidth() == 2, f"{w.getsampwidth()}-byte samples")
        n = w.getnframes()
        frames = w.readframes(n)
        expect(len(frames) == 2 * n, "short data chunk")
        return n, frames


def streamed_wav_pcm(data):
    """A streamed WAV (unknown-length header): the PCM after the `data` chunk header."""
    expect(data[:4] == b"RIFF" and data[8:12] == b"WAVE", "not a RIFF/WAVE stream")
    pos = 12
    while pos + 8 <= len(data):
        tag, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        if tag == b"fmt ":
            channels, rate, bits = struct.unpack("<xxHI6xH", data[pos + 8 : pos + 24])
            expect((channels, rate, bits) == (1, SAMPLE_RATE, 16), f"fmt {channels} {rate} {bits}")
        if tag == b"data":
            return data[pos + 8 :]
        pos += 8 + size + (size & 1)
    raise AssertionError("no data chunk")


def mp3_samples(data):
    """Walks MPEG-2 layer III frame headers (24 kHz mono, as the server writes them): samples."""
    pos, frames = 0, 0
    if data[:3] == b"ID3":
        size = data[6] << 21 | data[7] << 14 | data[8] << 7 | data[9]
        pos = 10 + size
    kbps = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]
    while pos + 4 <= len(data):
        h = int.from_bytes(data[pos : pos + 4], "big")
        expect(h >> 21 == 0x7FF, f"no frame sync at byte {pos}")
        version, layer = (h >> 19) & 3, (h >> 17) & 3
        expect((version, layer) == (2, 1), f"not MPEG-2 layer III at byte {pos}")
        rate = [22050, 24000, 16000][(h >> 10) & 3]
        expect(rate == SAMPLE_RATE, f"{rate} Hz")
        length = 72_000 * kbps[(h >> 12) & 15] // rate + ((h >> 9) & 1)
        expect(length > 4, f"bad frame length at byte {pos}")
        pos += length
        frames += 1
    expect(pos == len(data) and frames > 0, f"{len(data) - pos} trailing bytes, {frames} frames")
    return frames * 576


def ogg_opus_samples(data):
    """Walks Ogg pages (RFC 3533) of an Opus stream (RFC 7845): 24 kHz samples to play."""
    pos, packets, granule, pre_skip, last = 0, [], 0, None, False
    partial = b""
    while pos < len(data):
        expect(data[pos : pos + 4] == b"OggS", f"no page at byte {pos}")
        flags, granule_pos = data[pos + 5], struct.unpack("<q", data[pos + 6 : pos + 14])[0]
        n = data[pos + 26]
        lacing = data[pos + 27 : pos + 27 + n]
        body = pos + 27 + n
        for size in lacing:
            partial += data[body : body + size]
            body += size
            if size < 255:
                packets.append(partial)
                partial = b""
        if granule_pos >= 0:
            granule = granule_pos
        last = bool(flags & 4)
        pos = body
    expect(last, "no end-of-stream page")
    expect(packets[0][:8] == b"OpusHead" and packets[1][:8] == b"OpusTags", "no Opus headers")
    channels, pre_skip = packets[0][9], struct.unpack("<H", packets[0][10:12])[0]
    expect(channels == 1, f"{channels} channels")
    expect(len(packets) > 2, "no audio packets")
    return (granule - pre_skip) // 2


def plausible(n_samples):
    secs = n_samples / SAMPLE_RATE
    expect(0 < secs <= MAX_SECONDS, f"{secs:.2f} s of audio")
    return f"{secs:.2f} s"


def nonsilent(pcm):
    expect(any(b != 0 for b in pcm), "all silence")


def http(method, url, key=None, body=None, content_type=None, timeout=60):
    """A plain stdlib request (the voice library is not part of OpenAI's API): status, text."""
    req = urllib.request.Request(url, data=body, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def multipart(fields, files):
    """multipart/form-data of text `fields` and `files` (name: (filename, bytes, type))."""
    boundary = uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    for name, (filename, data, ctype) in files.items():
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            f"Content-Type: {ctype}\r\n\r\n"
        ).encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


def voice_clip():
    """4 s of a voiced, vowel-like signal (harmonics of a gliding pitch) as a WAV file."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        frames = bytearray()
        phase = 0.0
        for i in range(4 * SAMPLE_RATE):
            t = i / SAMPLE_RATE
            f0 = 120 + 20 * math.sin(2 * math.pi * 0.5 * t)
            phase += 2 * math.pi * f0 / SAMPLE_RATE
            env = 0.5 + 0.5 * math.sin(2 * math.pi * 3 * t) ** 2
            v = sum(math.sin(k * phase) / k for k in range(1, 12)) * 0.15 * env
            frames += struct.pack("<h", int(max(-1.0, min(1.0, v)) * 32767))
        w.writeframes(bytes(frames))
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    args = ap.parse_args()
    print(f"openai {openai.__version__} against {args.base_url}", flush=True)

    root = args.base_url.removesuffix("/v1")
    deadline = time.monotonic() + 60
    while True:
        try:
            if http("GET", f"{root}/ready", timeout=5)[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            print("FAIL the server was not ready in 60 s", flush=True)
            return 1
        time.sleep(0.1)

    client = OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=120)
    native_stream_format = "stream_format" in inspect.signature(client.audio.speech.create).parameters
    print(f"stream_format is a {'native' if native_stream_format else 'extra_body'} parameter", flush=True)

    def stream_args(fmt):
        return {"stream_format": fmt} if native_stream_format else {"extra_body": {"stream_format": fmt}}

    text = "Hello from the official OpenAI client."

    def whole_wav():
        r = client.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="wav")
        n, pcm = wav_samples(r.content)
        nonsilent(pcm)
        return plausible(n)

    def default_format_is_mp3():
        r = client.audio.speech.create(model="tts-1", voice="alloy", input=text)
        expect(r.response.headers["content-type"] == "audio/mpeg", r.response.headers["content-type"])
        return plausible(mp3_samples(r.content))

    def streaming_opus():
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format="opus", **stream_args("audio")
        ) as r:
            expect(r.http_response.headers.get("content-type") == "audio/ogg", r.http_response.headers)
            chunks = list(r.iter_bytes())
        return f"{len(chunks)} chunks, " + plausible(ogg_opus_samples(b"".join(chunks)))

    def whole_flac_with_extensions():
        r = client.audio.speech.create(
            model="chatterbox",
            voice="nova",
            input=text,
            response_format="flac",
            extra_body={"seed": 7, "exaggeration": 0.7, "temperature": 0.8},
        )
        data = r.content
        expect(data[:4] == b"fLaC", f"starts with {data[:4]!r}")
        return f"{len(data)} bytes"

    def whole_pcm():
        r = client.audio.speech.create(model="tts-1-hd", voice="echo", input=text, response_format="pcm")
        data = r.content
        expect(len(data) % 2 == 0, "odd byte count")
        nonsilent(data)
        return plausible(len(data) // 2)

    def same_seed_same_audio():
        body = {"seed": 11}
        a = client.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="pcm", extra_body=body)
        b = client.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="pcm", extra_body=body)
        expect(a.content == b.content, "different audio for one seed")

    def streaming_wav():
        chunks = []
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format="wav", **stream_args("audio")
        ) as r:
            expect(r.http_response.headers.get("content-type") == "audio/wav", r.http_response.headers)
            for chunk in r.iter_bytes():
                chunks.append(chunk)
        pcm = streamed_wav_pcm(b"".join(chunks))
        expect(len(pcm) % 2 == 0, "odd PCM length")
        nonsilent(pcm)
        return f"{len(chunks)} chunks, " + plausible(len(pcm) // 2)

    def streaming_pcm_to_file():
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format="pcm", **stream_args("audio")
        ) as r:
            data = r.read()
        expect(len(data) % 2 == 0, "odd byte count")
        return plausible(len(data) // 2)

    def sse_events():
        audio = b""
        done = None
        events = 0
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=text, response_format="pcm", **stream_args("sse")
        ) as r:
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                ev = json.loads(line[5:])
                events += 1
                if ev["type"] == "speech.audio.delta":
                    audio += base64.b64decode(ev["audio"])
                elif ev["type"] == "speech.audio.done":
                    done = ev
                else:
                    raise AssertionError(f"unexpected event {ev}")
        expect(done is not None, "no speech.audio.done")
        expect("usage" in done, done)
        return f"{events} events, " + plausible(len(audio) // 2)

    def library_voice():
        key = args.api_key
        body, ctype = multipart({"name": "narrator"}, {"file": ("narrator.wav", voice_clip(), "audio/wav")})
        status, reply = http("POST", f"{args.base_url}/voices", key, body, ctype, timeout=120)
        expect(status == 201, f"upload: {status} {reply}")
        r = client.audio.speech.create(model="tts-1", voice="narrator", input=text, response_format="wav")
        n, _ = wav_samples(r.content)
        status, listed = http("GET", f"{args.base_url}/voices", key)
        expect(status == 200 and "narrator" in listed, listed)
        status, reply = http("DELETE", f"{args.base_url}/voices/narrator", key)
        expect(status == 200, f"delete: {status} {reply}")
        try:
            client.audio.speech.create(model="tts-1", voice="narrator", input=text, response_format="wav")
        except openai.NotFoundError:
            pass
        else:
            raise AssertionError("a deleted voice still speaks")
        return plausible(n)

    def speed_scales_the_length():
        def pcm(speed):
            r = client.audio.speech.create(
                model="tts-1", voice="alloy", input=text, response_format="pcm", speed=speed,
                extra_body={"seed": 5},
            )
            return len(r.content) // 2
        one = pcm(1.0)
        out = []
        for speed in (2.0, 0.5):
            n = pcm(speed)
            # Rust's f64::round: half away from zero, as Python's floor(x + 0.5) for x >= 0
            want = math.floor(one / speed + 0.5)
            expect(n == want, f"speed {speed}: {n} samples, want {want} (speed 1: {one})")
            out.append(f"x{speed}: {n}")
        return f"x1: {one}, " + ", ".join(out)

    def timestamps(speed):
        """The SSE stream with timestamps: its samples and its sentences' (start, end)."""
        samples, spans = 0, []
        body = {"seed": 5, "timestamps": True}
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="Hello there. [pause 300ms] How are you?",
            response_format="pcm", speed=speed,
            **({"stream_format": "sse", "extra_body": body} if native_stream_format
               else {"extra_body": {**body, "stream_format": "sse"}}),
        ) as r:
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                ev = json.loads(line[5:])
                if ev["type"] == "speech.audio.delta":
                    samples += len(base64.b64decode(ev["audio"])) // 2
                elif ev["type"] == "speech.audio.timestamps":
                    for s in ev["sentences"]:
                        spans.append((s["start_time"], s["end_time"], [w["word"] for w in s["words"]]))
        return samples, spans

    def sse_timestamps_at_a_speed():
        n1, one = timestamps(1.0)
        n2, two = timestamps(2.0)
        words = [w for s in one for w in s[2]]
        expect(words == ["Hello", "there.", "How", "are", "you?"], f"words {words}")
        for n, spans in ((n1, one), (n2, two)):
            expect(len(spans) == 2, f"sentences {spans}")
            expect(abs(spans[-1][1] - n / SAMPLE_RATE) < 0.001, f"ends at {spans[-1][1]}, audio {n}")
        for (a1, b1, _), (a2, b2, _) in zip(one, two):
            expect(abs(a2 - a1 / 2) < 0.0015 and abs(b2 - b1 / 2) < 0.0015, f"{one} vs {two}")
        return f"{[(round(a, 3), round(b, 3)) for a, b, _ in two]} at x2, {n2} samples"

    def raises(exc, **kwargs):
        body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"}
        body.update(kwargs)

        def run():
            try:
                client.audio.speech.create(**body)
            except exc as e:
                err = e.body if isinstance(e.body, dict) else {}
                expect("message" in err and "type" in err, f"error body {e.body!r}")
                return f"{e.status_code} {err.get('code') or err.get('type')}: {err['message'][:70]}"
            raise AssertionError(f"no {exc.__name__}")

        return run

    def wrong_key():
        bad = OpenAI(base_url=args.base_url, api_key="not-the-key", max_retries=0, timeout=30)
        try:
            bad.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="wav")
        except openai.AuthenticationError as e:
            return f"{e.status_code}"
        raise AssertionError("no AuthenticationError")

    def models():
        ids = [m.id for m in client.models.list()]
        expect("chatterbox" in ids and "tts-1" in ids, ids)
        return ", ".join(ids)

    check("speech.create wav", whole_wav)
    check("speech.create without response_format: mp3", default_format_is_mp3)
    check("speech.create flac + Chatterbox fields in extra_body", whole_flac_with_extensions)
    check("speech.create pcm (tts-1-hd)", whole_pcm)
    check("same seed, same audio", same_seed_same_audio)
    check("with_streaming_response wav stream", streaming_wav)
    check("with_streaming_response pcm stream", streaming_pcm_to_file)
    check("with_streaming_response sse events", sse_events)
    check("with_streaming_response ogg opus stream", streaming_opus)
    check("library voice: upload, speak, list, delete", library_voice)
    check("unknown voice -> NotFoundError", raises(openai.NotFoundError, voice="nobody"))
    check("unknown model -> NotFoundError", raises(openai.NotFoundError, model="whisper-1"))
    check("aac -> BadRequestError", raises(openai.BadRequestError, response_format="aac"))
    check("speed 2.0 and 0.5: round(n / speed) samples", speed_scales_the_length)
    check("sse timestamps, at speed 1 and 2", sse_timestamps_at_a_speed)
    check("speed 4.5 -> BadRequestError", raises(openai.BadRequestError, speed=4.5))
    check("wrong key -> AuthenticationError", wrong_key)
    check("models.list", models)

    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}", flush=True)
        return 1
    print("all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
