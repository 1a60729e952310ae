// Mounts GraphiQL for work-ledger (ours, not vendored). Served by the binary
// itself, like everything else the page loads: no URL here leaves the server.
//
// - Queries and mutations: POST /graphql; subscriptions: /graphql/ws
//   (graphql-transport-ws). Both carry the JSON of the Headers pane: as HTTP
//   headers, and as the connection_init payload of the websocket, which is
//   where the server reads {"Authorization": "Bearer <token>"}.
// - The Headers pane is kept in this browser's localStorage (GraphiQL's
//   "persist headers" setting, on by default here), so the token is entered
//   once; new tabs start with the last headers that held a token.
// - The schema (docs, completion, validation) is schema.graphql, served
//   alongside, so it shows before a token is entered.
// - /#token=<token> pre-fills the Headers pane (the fragment never reaches the
//   server and is removed from the address bar); ?query=, ?variables= and
//   ?operationName= pre-fill the editors.
(function () {
  'use strict';

  var PLACEHOLDER = '<paste token>';
  var DEFAULT_QUERY = [
    '# work-ledger: cost, dispositions, stalled units.',
    '#',
    '# Put your token in the Headers pane below,',
    '# once (this browser keeps it):',
    '#   {"Authorization": "Bearer <paste token>"}',
    '# New token: `work-ledger token create`.',
    '# It goes with every query, and with every',
    '# subscription (websocket connection_init).',
    '# Run: the play button or Ctrl-Enter.',
    '',
    'query Dashboard {',
    '  serverTime',
    '  # What has it cost, and what is still open?',
    '  costSummary(groupBy: DISPOSITION) {',
    '    key',
    '    units',
    '    costCents',
    '    avgCostCents',
    '  }',
    '  dispositionSummary {',
    '    disposition',
    '    count',
    '    costCents',
    '  }',
    '  # Who went silent, and for how long?',
    '  stalls(first: 20) {',
    '    totalCount',
    '    edges {',
    '      holder',
    '      stalledForSeconds',
    '      node {',
    '        id',
    '        externalRef',
    '      }',
    '    }',
    '  }',
    '}',
    '',
  ].join('\n');

  function headersFor(token) {
    return JSON.stringify({ Authorization: 'Bearer ' + token }, null, 2);
  }

  // True when `text` is a JSON object with a filled-in Authorization header.
  function hasToken(text) {
    var headers;
    try {
      headers = JSON.parse(text || '');
    } catch (e) {
      return false;
    }
    if (!headers || typeof headers !== 'object') return false;
    return Object.keys(headers).some(function (key) {
      var value = headers[key];
      return key.toLowerCase() === 'authorization' && typeof value === 'string' &&
        /^Bearer \S/i.test(value) && value.indexOf(PLACEHOLDER) < 0;
    });
  }

  function stored(key) {
    try {
      return window.localStorage.getItem('graphiql:' + key);
    } catch (e) {
      return null;
    }
  }

  var props = {
    fetcher: GraphiQL.createFetcher({
      url: location.origin + '/graphql',
      subscriptionUrl: (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/graphql/ws',
    }),
    defaultQuery: DEFAULT_QUERY,
    shouldPersistHeaders: true,
  };

  // The last headers with a token that GraphiQL kept (it keeps none when
  // its "persist headers" setting is off): the pane as last edited, else the
  // tabs' headers, active tab first.
  function rememberedHeaders() {
    var candidates = [stored('headers')];
    try {
      var tabState = JSON.parse(stored('tabState') || 'null');
      if (tabState && Array.isArray(tabState.tabs)) {
        var active = tabState.tabs[tabState.activeTabIndex];
        candidates.push(active && active.headers);
        tabState.tabs.slice().reverse().forEach(function (tab) {
          candidates.push(tab && tab.headers);
        });
      }
    } catch (e) {
      // Unreadable tab state: GraphiQL starts afresh too.
    }
    return candidates.filter(hasToken)[0] || null;
  }

  var remembered = rememberedHeaders();
  var initialDefaultHeaders = remembered || headersFor(PLACEHOLDER);
  if (!remembered) props.defaultEditorToolsVisibility = 'headers';

  var fragment = new URLSearchParams(location.hash.slice(1));
  var token = fragment.get('token');
  if (token) {
    // Into the Headers pane; GraphiQL keeps it with the tab (see above).
    props.headers = headersFor(token);
    initialDefaultHeaders = props.headers;
    props.defaultEditorToolsVisibility = 'headers';
    fragment.delete('token');
    var rest = fragment.toString();
    history.replaceState(null, '', location.pathname + location.search + (rest ? '#' + rest : ''));
  }

  var search = new URLSearchParams(location.search);
  ['query', 'variables', 'operationName'].forEach(function (key) {
    if (search.has(key)) props[key] = search.get(key);
  });

  function WorkLedgerGraphiQL() {
    var state = React.useState(initialDefaultHeaders);
    var defaultHeaders = state[0];
    var setDefaultHeaders = state[1];
    return React.createElement(GraphiQL, Object.assign({}, props, {
      defaultHeaders: defaultHeaders,
      onEditHeaders: function (text) {
        if (hasToken(text)) setDefaultHeaders(text);
      },
    }));
  }

  function mount(schema) {
    if (schema) props.schema = schema;
    ReactDOM.createRoot(document.getElementById('graphiql')).render(React.createElement(WorkLedgerGraphiQL));
  }

  // The schema comes from the SDL the binary was built with, not from
  // introspection (which the server's query depth limit refuses). Should that
  // fail, GraphiQL falls back to introspecting.
  fetch(document.getElementById('work-ledger-schema').href)
    .then(function (response) {
      if (!response.ok) throw new Error('HTTP ' + response.status);
      return response.text();
    })
    .then(function (sdl) {
      return GraphiQL.GraphQL.buildSchema(sdl);
    })
    .then(mount, function (error) {
      console.warn('work-ledger: schema.graphql unusable, GraphiQL will introspect', error);
      mount(undefined);
    });
})();
