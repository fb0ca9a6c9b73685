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
for _, c in ipairs({ "PtxOptimise", "PtxCancel", "PtxReport", "PtxCandidates", "PtxApplyBest", "PtxShow" }) do
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

-- ptxfactory:// views: the URI and :PtxShow's arguments.
check("show uri", ptx.parse_show_uri("ptxfactory://show/ab12/3/rmsnorm.sass"),
  { job_id = "ab12", candidate = 3, kernel = "rmsnorm", view = "sass" })
check("not a show uri", ptx.parse_show_uri("file:///x/rmsnorm.ptx"), nil)
check("bad view", ptx.parse_show_uri("ptxfactory://show/ab12/3/rmsnorm.cu"), nil)
check("show args none", ptx.parse_show_args({}), { view = "ptx" })
check("show args", ptx.parse_show_args({ "2", "sass" }), { view = "sass", candidate = 2 })
check("show args job", ptx.parse_show_args({ "ptx", "job=ab12" }), { view = "ptx", job_id = "ab12" })
check("show args bad", select(2, ptx.parse_show_args({ "fast" })), '"fast" is not a candidate number, ptx or sass')
check("BufReadCmd registered", #vim.api.nvim_get_autocmds({ group = "ptxfactory", event = "BufReadCmd" }), 1)

-- BufReadCmd fills a read-only buffer from a (fake) server: workspace/textDocumentContent first...
local asked = {}
local content_ok = true
local fake = {
  id = 99,
  request = function(_, method, params, cb)
    table.insert(asked, method)
    if method == "workspace/textDocumentContent" then
      if content_ok then
        return cb(nil, { text = "// ptxfactory: PTX of candidate 1\n.visible .entry k()\n{\n}\n" })
      end
      return cb({ code = -32602, message = "unknown here" }, nil)
    end
    local a = params.arguments[1]
    check("show asked without showDocument", { params.command, a.job_id, a.candidate, a.view, a.show },
      { "ptxfactory.show", "ab12", 1, "ptx", false })
    cb(nil, { job_id = "ab12", candidate = 1, view = "ptx", original_uri = "ptxfactory://show/ab12/0/k.ptx",
      original_text = "// original\n", uri = "ptxfactory://show/ab12/1/k.ptx", text = "// again from show\nret;\n", shown = false })
  end,
}
local real_client = ptx.client
ptx.client = function() return fake end
vim.cmd("edit ptxfactory://show/ab12/1/k.ptx")
local vb = vim.api.nvim_get_current_buf()
check("view lines", vim.api.nvim_buf_get_lines(vb, 0, -1, false), { "// ptxfactory: PTX of candidate 1", ".visible .entry k()", "{", "}" })
check("view read-only", { vim.bo[vb].modifiable, vim.bo[vb].readonly, vim.bo[vb].buftype, vim.bo[vb].modified },
  { false, true, "nofile", false })
check("view filetype", vim.bo[vb].filetype, "ptx")
check("asked content", asked, { "workspace/textDocumentContent" })
-- ...then, when the server no longer has it, ptxfactory.show again with the URI's job, candidate and view.
content_ok, asked = false, {}
vim.cmd("bwipeout! " .. vb)
vim.cmd("edit ptxfactory://show/ab12/1/k.ptx")
check("view from show", vim.api.nvim_buf_get_lines(0, 0, -1, false), { "// again from show", "ret;" })
check("asked show", asked, { "workspace/textDocumentContent", "workspace/executeCommand" })
check("both texts kept", ptx.views["ptxfactory://show/ab12/0/k.ptx"], "// original\n")
-- open_views: the original on the left, the candidate on the right, in a new tab.
content_ok = true
local left, right = ptx.open_views({ original_uri = "ptxfactory://show/ab12/0/k.ptx", uri = "ptxfactory://show/ab12/1/k.ptx" })
check("two windows", #vim.api.nvim_tabpage_list_wins(0), 2)
check("sides", { vim.api.nvim_buf_get_name(left), vim.api.nvim_buf_get_name(right) },
  { "ptxfactory://show/ab12/0/k.ptx", "ptxfactory://show/ab12/1/k.ptx" })
check("right has the cursor", vim.api.nvim_get_current_buf(), right)
ptx.client = real_client
io.stdout:write(("%d passed, 0 failed\n"):format(n))
os.exit(0)
