// Unit tests of the extension's VS Code-free logic (src/config.ts), run with node's own test runner:
//   npx tsc -p . --outDir out && node --test out/test/config.test.js
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CODE_ACTION_KIND,
  DEFAULT_SETTINGS,
  JobTable,
  NotificationProgressFeature,
  SHOW,
  SHOW_SCHEME,
  SettingsError,
  ViewCache,
  contentText,
  kernelAt,
  kernelLenses,
  parseCandidate,
  parseShowUri,
  parseTcpAddress,
  reportMarkdown,
  reportText,
  resolveServer,
  shellQuote,
  showArgs,
  shownViews,
  viewsTitle,
} from "../src/config";

test("defaults: the stdio bridge to the shared daemon, `ptxfactory lsp`", () => {
  const r = resolveServer({});
  assert.deepEqual(r.target, { kind: "stdio", command: "ptxfactory", args: ["lsp"], env: {} });
  assert.deepEqual(r.initializationOptions, {});
  assert.equal(r.description, "ptxfactory lsp");
  assert.deepEqual(resolveServer(DEFAULT_SETTINGS), r);
});

test("settings VS Code leaves unset (undefined) take their defaults", () => {
  const r = resolveServer({ mode: undefined, command: undefined, token: undefined });
  assert.deepEqual(r.target, { kind: "stdio", command: "ptxfactory", args: ["lsp"], env: {} });
});

test("command mode: any argv, e.g. the single-session server", () => {
  const r = resolveServer({ mode: "command", command: ["/opt/venv/bin/ptxfactory", "serve", "--stdio", "--backend", "gpu"] });
  assert.deepEqual(r.target, {
    kind: "stdio", command: "/opt/venv/bin/ptxfactory", args: ["serve", "--stdio", "--backend", "gpu"], env: {},
  });
});

test("a token goes to initializationOptions (protocol/lsp.py InitializationOptions), in every mode", () => {
  const r = resolveServer({ token: " s3cret " });
  assert.deepEqual(r.initializationOptions, { token: "s3cret" });
  assert.deepEqual(r.target, { kind: "stdio", command: "ptxfactory", args: ["lsp"], env: {} });
  assert.deepEqual(resolveServer({ token: "   " }).initializationOptions, {});
});

test("command mode: an empty command is an error", () => {
  assert.throws(() => resolveServer({ command: [] }), SettingsError);
  assert.throws(() => resolveServer({ command: [""] }), /must name a program/);
  assert.throws(() => resolveServer({ command: "ptxfactory lsp" as unknown as string[] }), /list of strings/);
});

test("ssh mode: `ssh -T [sshArgs] HOST command...`, each word quoted for the remote shell", () => {
  const r = resolveServer({ mode: "ssh", sshHost: "me@gpu-box", sshArgs: ["-p", "2222"], command: ["ptxfactory", "lsp"] });
  assert.deepEqual(r.target, { kind: "stdio", command: "ssh", args: ["-T", "-p", "2222", "me@gpu-box", "ptxfactory", "lsp"], env: {} });
  assert.equal(r.description, "ssh me@gpu-box");
  const q = resolveServer({ mode: "ssh", sshHost: "gpu", command: ["/home/me/my env/bin/ptxfactory", "lsp"], token: "t" });
  assert.deepEqual(q.target.kind === "stdio" && q.target.args, ["-T", "gpu", "'/home/me/my env/bin/ptxfactory'", "lsp"]);
  assert.deepEqual(q.initializationOptions, { token: "t" });
});

test("ssh mode: a missing or option-like host is an error", () => {
  assert.throws(() => resolveServer({ mode: "ssh" }), /sshHost: "" is not a host/);
  assert.throws(() => resolveServer({ mode: "ssh", sshHost: "-oProxyCommand=evil" }), SettingsError);
  assert.throws(() => resolveServer({ mode: "ssh", sshHost: "two words" }), SettingsError);
});

test("tcp mode: host:port and [v6]:port", () => {
  assert.deepEqual(resolveServer({ mode: "tcp", tcpAddress: "gpu-box:7777" }).target, { kind: "tcp", host: "gpu-box", port: 7777 });
  assert.deepEqual(resolveServer({ mode: "tcp" }).target, { kind: "tcp", host: "127.0.0.1", port: 7777 });
  assert.deepEqual(parseTcpAddress("[::1]:9000"), { host: "::1", port: 9000 });
  assert.equal(resolveServer({ mode: "tcp", tcpAddress: "h:1", token: "k" }).initializationOptions.token, "k");
  for (const bad of ["gpu-box", "gpu-box:", ":7777", "h:0", "h:65536", "h:12ab", "::1:9000"]) {
    assert.throws(() => parseTcpAddress(bad), SettingsError, bad);
  }
});

test("an unknown mode is an error", () => {
  assert.throws(() => resolveServer({ mode: "websocket" as never }), /is not one of command, ssh, tcp/);
});

test("shellQuote leaves safe words alone and quotes the rest", () => {
  assert.equal(shellQuote("--backend=simulated"), "--backend=simulated");
  assert.equal(shellQuote(""), "''");
  assert.equal(shellQuote("it's"), `'it'"'"'s'`);
  assert.equal(shellQuote("$(rm -rf ~)"), "'$(rm -rf ~)'");
});

const lens = (kernel: string, line: number, command = "ptxfactory.optimise") => ({
  range: { start: { line, character: 0 }, end: { line, character: 0 } },
  command: { title: "Optimise kernel", command, arguments: [{ uri: "file:///k.cu", kernel }] },
});

test("kernelLenses keeps ptxfactory.optimise lenses, by line", () => {
  const ks = kernelLenses([lens("b", 20), lens("x", 5, "other.command"), lens("a", 3)]);
  assert.deepEqual(ks.map((k) => [k.kernel, k.line]), [["a", 3], ["b", 20]]);
  assert.deepEqual(kernelLenses(null), []);
});

test("kernelAt: the last kernel at or above the cursor, else the only one", () => {
  const ks = kernelLenses([lens("a", 3), lens("b", 20)]);
  assert.equal(kernelAt(ks, 10)?.kernel, "a");
  assert.equal(kernelAt(ks, 20)?.kernel, "b");
  assert.equal(kernelAt(ks, 1), undefined);
  assert.equal(kernelAt(kernelLenses([lens("a", 3)]), 0)?.kernel, "a");
});

test("JobTable follows ptxfactory/progress: begin, reports (increments never negative), end", () => {
  const jobs = new JobTable();
  const base = { token: "ptxfactory/job/j1", job_id: "j1", uri: "file:///k.cu", kernel: "rmsnorm" };
  jobs.progress({ ...base, kind: "begin", title: "Optimising rmsnorm", percentage: 0 });
  assert.equal(jobs.progress({ ...base, kind: "report", message: "1/10", percentage: 10 }).increment, 10);
  assert.equal(jobs.progress({ ...base, kind: "report", message: "2/10", percentage: 30 }).increment, 20);
  assert.equal(jobs.progress({ ...base, kind: "report", percentage: 20 }).increment, 0);
  assert.deepEqual(jobs.running().map((j) => j.jobId), ["j1"]);
  jobs.progress({ ...base, kind: "end", message: "best: 2.00x faster" });
  assert.deepEqual(jobs.running(), []);
  assert.equal(jobs.latest("file:///k.cu", "rmsnorm")?.message, "best: 2.00x faster");
});

test("JobTable: started() then progress refer to the same job; newest first; ended()", () => {
  const jobs = new JobTable();
  jobs.started({ job_id: "a", token: "ta" }, { uri: "file:///k.cu", kernel: "k1" });
  jobs.started({ job_id: "b", token: "tb" }, { uri: "file:///k.cu", kernel: "k2" });
  jobs.progress({ token: "ta", job_id: "a", uri: "file:///k.cu", kernel: "k1", kind: "report", percentage: 50 });
  assert.deepEqual(jobs.all().map((j) => j.jobId), ["b", "a"]);
  assert.equal(jobs.get("a")?.percentage, 50);
  jobs.ended("b");
  assert.deepEqual(jobs.running().map((j) => j.jobId), ["a"]);
});

test("JobTable.listed: jobs from ptxfactory.jobs join the table; queued and running ones count as running", () => {
  const jobs = new JobTable();
  jobs.started({ job_id: "a", token: "ta" }, { uri: "file:///k.cu", kernel: "k1" });
  jobs.listed({ job_id: "a", uri: "file:///k.cu", kernel: "k1", state: "finished", percentage: 100, message: "best" });
  jobs.listed({ job_id: "c", uri: "file:///o.cu", kernel: "k3", state: "queued" });
  assert.deepEqual(jobs.running().map((j) => j.jobId), ["c"]);
  assert.equal(jobs.get("a")?.token, "ta");
  assert.equal(jobs.get("c")?.token, "");
  jobs.progress({ token: "tc", job_id: "c", uri: "file:///o.cu", kernel: "k3", kind: "begin" });
  assert.equal(jobs.get("c")?.token, "tc");
});

test("reportMarkdown: the job, the faster candidates (preferred marked), the rejected ones with reasons", () => {
  const md = reportMarkdown(
    "rmsnorm",
    { jobId: "j1", token: "t", uri: "u", kernel: "rmsnorm", running: false, percentage: 99, message: "best: 2.41x faster" },
    [
      { title: "Apply candidate 3: 2.41x faster", kind: CODE_ACTION_KIND, isPreferred: true },
      { title: "Apply candidate 1: 1.10x faster", kind: CODE_ACTION_KIND },
      { title: "Candidate 2 rejected: wide loads", kind: CODE_ACTION_KIND, disabled: { reason: "correctness: 12 of 4000 wrong" } },
      { title: "Someone else's quick fix", kind: "quickfix" },
    ],
  );
  assert.match(md, /^# ptxfactory: rmsnorm\n\nJob j1: ended, best: 2.41x faster\n/);
  assert.match(md, /- Apply candidate 3: 2.41x faster \(preferred\)\n- Apply candidate 1: 1.10x faster\n/);
  assert.match(md, /## Rejected\n\n- Candidate 2 rejected: wide loads: correctness: 12 of 4000 wrong\n/);
  assert.doesNotMatch(md, /quick fix/);
  assert.match(reportMarkdown("k", undefined, []), /No job started from this window[\s\S]*\nnone\n/);
});

test("reportText accepts a string, {markdown}, {text}, or anything else as JSON", () => {
  assert.equal(reportText("# r"), "# r");
  assert.equal(reportText({ job_id: "j", path: "/r/report.md", uri: "file:///r/report.md", markdown: "# m", shown: false }), "# m");
  assert.equal(reportText({ text: "t" }), "t");
  assert.match(reportText({ rows: [1] }), /^```json\n\{\n {2}"rows"/);
});

test("NotificationProgressFeature withdraws window.workDoneProgress (so the server sends ptxfactory/progress)", () => {
  const caps = { window: { workDoneProgress: true, showDocument: { support: true } } };
  new NotificationProgressFeature().fillClientCapabilities(caps);
  assert.deepEqual(caps, { window: { workDoneProgress: false, showDocument: { support: true } } });
  assert.deepEqual(new NotificationProgressFeature().getState(), { kind: "static" });
});

test("ptxfactory:// URIs: job, candidate, kernel and view; anything else is not one", () => {
  assert.deepEqual(parseShowUri("ptxfactory://show/ab12/3/rmsnorm.sass"), { jobId: "ab12", candidate: 3, kernel: "rmsnorm", view: "sass" });
  assert.equal(parseShowUri("file:///x/rmsnorm.ptx"), undefined);
  assert.equal(parseShowUri("ptxfactory://show/ab12/3/rmsnorm.cu"), undefined);
  assert.equal(parseShowUri("ptxfactory://show/ab12/x/rmsnorm.ptx"), undefined);
  assert.equal(SHOW, "ptxfactory.show");
  assert.equal(SHOW_SCHEME, "ptxfactory");
});

test("ptxfactory.show's arguments never ask the server to open the documents", () => {
  assert.deepEqual(showArgs("j1", "ptx"), { job_id: "j1", view: "ptx", show: false });
  assert.deepEqual(showArgs("j1", "sass", 0), { job_id: "j1", view: "sass", candidate: 0, show: false });
  assert.deepEqual(parseCandidate(""), {});
  assert.deepEqual(parseCandidate(" 2 "), { candidate: 2 });
  assert.match(parseCandidate("best") as string, /not a candidate number/);
  assert.match(parseCandidate("-1") as string, /not a candidate number/);
});

test("a ptxfactory.show answer: both views kept, titled, served from the cache", () => {
  const answer = {
    job_id: "j1", candidate: 2, view: "ptx", original_uri: "ptxfactory://show/j1/0/rmsnorm.ptx", original_text: "// original\n",
    uri: "ptxfactory://show/j1/2/rmsnorm.ptx", text: "// candidate 2\n", shown: false,
  };
  const v = shownViews(answer)!;
  assert.equal(v.candidate, 2);
  assert.equal(viewsTitle(v), "rmsnorm PTX: original ↔ candidate 2");
  assert.equal(viewsTitle({ ...v, uri: v.originalUri, candidate: 0 }), "rmsnorm PTX: the original");
  assert.equal(shownViews({ ...answer, view: "cubin" }), undefined);
  assert.equal(shownViews(null), undefined);
  assert.equal(shownViews("text"), undefined);
  const cache = new ViewCache(3);
  cache.add(v);
  assert.equal(cache.get("ptxfactory://show/j1/0/rmsnorm.ptx"), "// original\n");
  assert.equal(cache.get(v.uri), "// candidate 2\n");
  cache.set("a", "1");
  cache.set("b", "2");
  assert.equal(cache.size, 3);
  assert.equal(cache.get(v.originalUri), undefined); // the oldest went first
  assert.equal(contentText({ text: "x" }), "x");
  assert.equal(contentText({}), undefined);
  assert.equal(contentText(null), undefined);
});
