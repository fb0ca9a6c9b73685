-- Unit checks of the Neovim plugin's pure parts (no server): nvim --headless --clean -u NONE -l tests/editors/nvim_unit.lua
-- PTX_PLUGIN_DIR is editors/nvim. Prints "ok N" per check; exits 1 on the first failure.
vim.opt.runtimepath:prepend((assert(vim.env.PTX_PLUGIN_DIR, "PTX_PLUGIN_DIR")))
local ptx = require("ptxfactory")
local n = 0

local function check(name, got, want)
  n = n + 1
  if not vim.deep_equal(got, want) then
    io.stderr:write(("FAIL %s:\n  got  %s\n  want %s\n"):format(name, vim.inspect(got), vim.inspect(want)))
    os.exit(1)
  end
  io.stdout:write(("ok %d %s\n"):format(n, name))
end

local function fails(name, fn, pattern)
  local ok, err = pcall(fn)
  check(name .. " fails", (not ok) and tostring(err):find(pattern, 1, true) ~= nil, true)
end

-- The default: the stdio bridge to the daemon.
local cmd, how = ptx.resolve_cmd(ptx.defaults)
check("default cmd", cmd, { "ptxfactory", "lsp" })
check("default description", how, "ptxfactory lsp")

-- A plain argv, e.g. the single-session server or a hand-written ssh command.
check("plain cmd", (ptx.resolve_cmd({ cmd = { "ptxfactory", "serve", "--stdio" } })), { "ptxfactory", "serve", "--stdio" })
check("ssh as cmd", (ptx.resolve_cmd({ cmd = { "ssh", "gpu", "ptxfactory", "lsp" } })), { "ssh", "gpu", "ptxfactory", "lsp" })

-- ssh = host: the command runs there, each word quoted for the remote shell.
check("ssh", (ptx.resolve_cmd({ ssh = "gpu-host", cmd = { "ptxfactory", "lsp" } })), { "ssh", "-T", "gpu-host", "ptxfactory", "lsp" })
check("ssh args and quoting", (ptx.resolve_cmd({
  ssh = "me@gpu", ssh_args = { "-p", "2222" }, cmd = { "/opt/my env/bin/ptxfactory", "lsp", "it's" },
})), { "ssh", "-T", "-p", "2222", "me@gpu", "'/opt/my env/bin/ptxfactory'", "lsp", [['it'"'"'s']] })
fails("ssh option as host", function() ptx.resolve_cmd({ ssh = "-oProxyCommand=x", cmd = { "a" } }) end, "is not a host")
fails("two transports", function() ptx.resolve_cmd({ ssh = "h", tcp = "h:1", cmd = { "a" } }) end, "at most one")
fails("empty cmd", function() ptx.resolve_cmd({ cmd = {} }) end, "non-empty")

-- tcp and socket: a connect function for vim.lsp.config's cmd.
local fn, desc = ptx.resolve_cmd({ tcp = "127.0.0.1:7777" })
check("tcp gives a function", type(fn), "function")
check("tcp description", desc, "tcp 127.0.0.1:7777")
check("v6 address", { ptx.parse_address("[::1]:9000") }, { "::1", 9000 })
fails("no port", function() ptx.parse_address("localhost") end, "is not host:port")
fails("bad port", function() ptx.parse_address("h:70000") end, "is not host:port")
local sfn, sdesc = ptx.resolve_cmd({ socket = "/run/ptx.sock" })
check("socket", { type(sfn), sdesc }, { "function", "socket /run/ptx.sock" })

check("shell_quote safe", ptx.shell_quote("--backend=simulated"), "--backend=simulated")
check("shell_quote empty", ptx.shell_quote(""), "''")

-- The kernel at the cursor: the last lens at or above it; the only one otherwise.
local ks = { { kernel = "a", line = 3 }, { kernel = "b", line = 20 } }
check("kernel above", ptx.kernel_at(ks, 10).kernel, "a")
check("kernel at its line", ptx.kernel_at(ks, 20).kernel, "b")
check("before every kernel", ptx.kernel_at(ks, 1), nil)
check("the only kernel", ptx.kernel_at({ { kernel = "a", line = 3 } }, 0).kernel, "a")

-- The report's lines from code actions: the preferred one marked, rejected ones with their reason.
local lines = ptx.report_lines("rmsnorm", { job_id = "j1", state = "ended", message = "best: 2.00x faster" }, {
  { title = "Apply candidate 2: 2.00x faster", kind = ptx.KIND, isPreferred = true },
  { title = "Apply candidate 1: 1.50x faster", kind = ptx.KIND },
  { title = "Candidate 3 rejected: x", kind = ptx.KIND, disabled = { reason = "correctness: wrong" } },
  { title = "someone else's", kind = "quickfix" },
})
check("report", lines, {
  "# ptxfactory: rmsnorm", "", "Job j1: ended, best: 2.00x faster",
  "", "## Faster candidates (:PtxCandidates, :PtxApplyBest)", "",
  "- Apply candidate 2: 2.00x faster (preferred)", "- Apply candidate 1: 1.50x faster",
  "", "## Rejected", "", "- Candidate 3 rejected: x: correctness: wrong",
})

-- setup registers the config and the commands.
ptx.setup({ cmd = { "true" }, notify = false })
check("config cmd", vim.lsp.config.ptxfactory.cmd, { "true" })
check("filetypes", vim.lsp.config.ptxfactory.filetypes, { "cuda", "ptx" })
check("lens command handled here", type(vim.lsp.config.ptxfactory.commands["ptxfactory.optimise"]), "function")
check("ptx filetype", vim.filetype.match({ filename = "k.ptx" }), "ptx")
check("cu filetype", vim.filetype.match({ filename = "k.cu" }), "cuda")
for _, c in ipairs({ "PtxOptimise", "PtxCancel", "PtxReport", "PtxCandidates", "PtxApplyBest" }) do
  check("command " .. c, vim.fn.exists(":" .. c), 2)
end
-- A second setup with a shorter cmd replaces it whole (no index-wise merge).
ptx.setup({ ssh = "h", cmd = { "x" }, notify = false })
check("setup again", vim.lsp.config.ptxfactory.cmd, { "ssh", "-T", "h", "x" })

-- The connection drops: a message, the running job marked, the statusline says so; progress brings it back.
local messages, fired = {}, {}
vim.notify = function(msg, level) table.insert(messages, { msg, level }) end
vim.api.nvim_create_autocmd("User", { pattern = "PtxProgress", callback = function(ev) table.insert(fired, ev.data) end })
ptx.setup({ cmd = { "x" } })
ptx.jobs = { j1 = { job_id = "j1", kernel = "rmsnorm", state = "running", percentage = 4, client_id = 7 } }
check("status while running", ptx.status(), "ptx: rmsnorm 4%")
ptx.on_disconnect(7, 1, 0)
check("job marked", { ptx.jobs.j1.state, ptx.jobs.j1.message }, { "disconnected", ptx.STOPPED })
check("status after the drop", ptx.status(), "ptx: rmsnorm 4% (daemon stopped)")
check("warned", messages[#messages][2], vim.log.levels.WARN)
check("message", messages[#messages][1]:find("the daemon stopped; the job will resume when it restarts", 1, true) ~= nil, true)
check("autocmd fired", fired[#fired].disconnected, true)
ptx.jobs = {}
check("status with no job", ptx.status(), "ptx: disconnected")
check("on_exit registered", type(vim.lsp.config.ptxfactory.on_exit), "function")
check("token", ptx.token({ token = "t" }), "t")
local tf = vim.fn.tempname()
vim.fn.writefile({ "from-file " }, tf)
check("token file", ptx.token({ token_file = tf }), "from-file")
io.stdout:write(("%d passed, 0 failed\n"):format(n))
os.exit(0)
